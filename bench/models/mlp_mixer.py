"""MLP-Mixer (Tolstikhin et al.) for 32x32 images: patches, then per layer a token-mixing
MLP across patches and a channel-mixing MLP across features, each pre-norm and residual.
A benchmark network for Python models (bench/specs/py-mixer.yaml)."""
import torch
from torch import nn


class MixerBlock(nn.Module):
    def __init__(self, tokens, dim, token_hidden, channel_hidden):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.tokens = nn.Sequential(nn.Linear(tokens, token_hidden), nn.GELU(),
                                    nn.Linear(token_hidden, tokens))
        self.norm2 = nn.LayerNorm(dim)
        self.channels = nn.Sequential(nn.Linear(dim, channel_hidden), nn.GELU(),
                                      nn.Linear(channel_hidden, dim))

    def forward(self, x):
        x = x + self.tokens(self.norm1(x).transpose(1, 2)).transpose(1, 2)
        return x + self.channels(self.norm2(x))


class MlpMixer(nn.Module):
    def __init__(self, image_size=32, channels=3, patch=4, dim=512, depth=8, token_hidden=256,
                 channel_hidden=2048, classes=10):
        super().__init__()
        tokens = (image_size // patch) ** 2
        self.embed = nn.Conv2d(channels, dim, kernel_size=patch, stride=patch)
        self.blocks = nn.Sequential(*[MixerBlock(tokens, dim, token_hidden, channel_hidden)
                                      for _ in range(depth)])
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, classes)

    def forward(self, images):
        x = self.embed(images).flatten(2).transpose(1, 2)
        return self.head(self.norm(self.blocks(x)).mean(dim=1))


def build_model(**args):
    return MlpMixer(**args)
