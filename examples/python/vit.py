"""A small vision transformer in plain PyTorch (nn.TransformerEncoder), as a team would
write its own model: Stoke imports this file, calls build_model(**args) and trains what it
returns (examples/python/vit-fashion-mnist.yaml).
"""
import torch
from torch import nn


class VisionTransformer(nn.Module):
    def __init__(self, image_size=28, channels=1, patch=4, width=128, depth=4, heads=4,
                 classes=10, dropout=0.0):
        super().__init__()
        if image_size % patch:
            raise ValueError(f"patch {patch} does not divide the image size {image_size}")
        patches = (image_size // patch) ** 2
        self.embed = nn.Conv2d(channels, width, kernel_size=patch, stride=patch)
        self.cls = nn.Parameter(torch.zeros(1, 1, width))
        self.position = nn.Parameter(torch.randn(1, patches + 1, width) * 0.02)
        layer = nn.TransformerEncoderLayer(width, heads, dim_feedforward=4 * width,
                                           dropout=dropout, activation="gelu",
                                           batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, depth)
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, classes)

    def forward(self, images):
        x = self.embed(images).flatten(2).transpose(1, 2)  # [B, patches, width]
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.position
        x = self.encoder(x)
        return self.head(self.norm(x[:, 0]))


def build_model(**args):
    return VisionTransformer(**args)
