"""ViT-S/4 for 32x32 images, written as people write it: patches by a strided
convolution, a class token, learned positions, nn.TransformerEncoder (pre-norm, GELU).
A benchmark network for Python models (bench/specs/py-vit.yaml)."""
import torch
from torch import nn


class VisionTransformer(nn.Module):
    def __init__(self, image_size=32, channels=3, patch=4, width=384, depth=8, heads=6,
                 classes=10):
        super().__init__()
        patches = (image_size // patch) ** 2
        self.embed = nn.Conv2d(channels, width, kernel_size=patch, stride=patch)
        self.cls = nn.Parameter(torch.zeros(1, 1, width))
        self.position = nn.Parameter(torch.randn(1, patches + 1, width) * 0.02)
        layer = nn.TransformerEncoderLayer(width, heads, dim_feedforward=4 * width, dropout=0.0,
                                           activation="gelu", batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, depth, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, classes)

    def forward(self, images):
        x = self.embed(images).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.position
        return self.head(self.norm(self.encoder(x)[:, 0]))


def build_model(**args):
    return VisionTransformer(**args)
