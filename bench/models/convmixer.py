"""ConvMixer-256/8 (Trockman and Kolter, "Patches Are All You Need?"), the CIFAR-10 form:
patch embedding, then per layer a residual depthwise convolution and a pointwise one,
each followed by GELU and batch norm. A benchmark network for Python models
(bench/specs/py-convmixer.yaml)."""
from torch import nn


class Residual(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x) + x


def build_model(dim=256, depth=8, kernel_size=5, patch_size=2, channels=3, classes=10):
    return nn.Sequential(
        nn.Conv2d(channels, dim, kernel_size=patch_size, stride=patch_size),
        nn.GELU(),
        nn.BatchNorm2d(dim),
        *[nn.Sequential(
            Residual(nn.Sequential(
                nn.Conv2d(dim, dim, kernel_size, groups=dim, padding="same"),
                nn.GELU(),
                nn.BatchNorm2d(dim))),
            nn.Conv2d(dim, dim, kernel_size=1),
            nn.GELU(),
            nn.BatchNorm2d(dim)) for _ in range(depth)],
        nn.AdaptiveAvgPool2d((1, 1)),
        nn.Flatten(),
        nn.Linear(dim, classes))
