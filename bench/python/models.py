"""The models Stoke's engine builds (worker/models/), written again in PyTorch Python,
layer for layer and initialised the same way, so that the benchmarks compare the two
runtimes on the same network."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

INIT_STD = 0.02


def _linear(inp, out, std):
    layer = nn.Linear(inp, out)
    nn.init.normal_(layer.weight, 0.0, std)
    nn.init.zeros_(layer.bias)
    return layer


class GptBlock(nn.Module):
    """worker/models/gpt.cc GptBlockImpl: pre-norm attention and a 4x GELU MLP."""

    def __init__(self, width, heads, layers):
        super().__init__()
        residual_std = INIT_STD / math.sqrt(2.0 * layers)
        self.heads = heads
        self.attention_norm = nn.LayerNorm(width)
        self.qkv = _linear(width, 3 * width, INIT_STD)
        self.attention_out = _linear(width, width, residual_std)
        self.mlp_norm = nn.LayerNorm(width)
        self.mlp_in = _linear(width, 4 * width, INIT_STD)
        self.mlp_out = _linear(4 * width, width, residual_std)

    def forward(self, x):
        b, t, w = x.shape
        q, k, v = self.qkv(self.attention_norm(x)).split(w, dim=-1)
        heads = lambda z: z.view(b, t, self.heads, w // self.heads).transpose(1, 2)
        y = F.scaled_dot_product_attention(heads(q), heads(k), heads(v), is_causal=True)
        x = x + self.attention_out(y.transpose(1, 2).reshape(b, t, w))
        return x + self.mlp_out(F.gelu(self.mlp_in(self.mlp_norm(x))))


class Gpt(nn.Module):
    """worker/models/gpt.cc GptImpl: learned positions, tied output layer."""

    def __init__(self, layers, heads, width, context, vocab):
        super().__init__()
        self.token_embedding = nn.Embedding(vocab, width)
        self.position_embedding = nn.Embedding(context, width)
        nn.init.normal_(self.token_embedding.weight, 0.0, INIT_STD)
        nn.init.normal_(self.position_embedding.weight, 0.0, INIT_STD)
        self.blocks = nn.ModuleList(GptBlock(width, heads, layers) for _ in range(layers))
        self.final_norm = nn.LayerNorm(width)

    def forward(self, tokens):
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.token_embedding(tokens) + self.position_embedding(positions)
        for block in self.blocks:
            x = block(x)
        return F.linear(self.final_norm(x), self.token_embedding.weight)


def _conv(inp, out, kernel, stride):
    conv = nn.Conv2d(inp, out, kernel, stride=stride, padding=kernel // 2, bias=False)
    nn.init.kaiming_normal_(conv.weight, mode="fan_out", nonlinearity="relu")
    return conv


class ResidualBlock(nn.Module):
    """worker/models/resnet.cc ResidualBlockImpl (bottleneck: stride on the 3x3)."""

    def __init__(self, inp, width, stride, bottleneck):
        super().__init__()
        out = 4 * width if bottleneck else width
        shapes = ([(inp, width, 1, 1), (width, width, 3, stride), (width, out, 1, 1)]
                  if bottleneck else [(inp, width, 3, stride), (width, width, 3, 1)])
        self.convs = nn.ModuleList(_conv(*s) for s in shapes)
        self.norms = nn.ModuleList(nn.BatchNorm2d(s[1]) for s in shapes)
        nn.init.zeros_(self.norms[-1].weight)
        self.shortcut = None
        if stride != 1 or inp != out:
            self.shortcut = _conv(inp, out, 1, stride)
            self.shortcut_norm = nn.BatchNorm2d(out)
        self.out_channels = out

    def forward(self, inputs):
        x = inputs
        for i, (conv, norm) in enumerate(zip(self.convs, self.norms)):
            x = norm(conv(x))
            if i != len(self.convs) - 1:
                x = F.relu(x)
        identity = self.shortcut_norm(self.shortcut(inputs)) if self.shortcut is not None else inputs
        return F.relu(x + identity)


class ResNet(nn.Module):
    """worker/models/resnet.cc ResNetImpl: the ImageNet stem (7x7/2 + max-pool), or the
    small-image stem (3x3/1, no pooling) that Stoke picks for images of 64 pixels or less."""

    LAYOUTS = {18: ([2, 2, 2, 2], False), 34: ([3, 4, 6, 3], False), 50: ([3, 4, 6, 3], True)}

    def __init__(self, depth, channels, num_classes, small_stem=False):
        super().__init__()
        blocks, bottleneck = self.LAYOUTS[depth]
        self.small_stem = small_stem
        self.stem = _conv(channels, 64, 3, 1) if small_stem else _conv(channels, 64, 7, 2)
        self.stem_norm = nn.BatchNorm2d(64)
        layers, c = [], 64
        for stage, count in enumerate(blocks):
            for b in range(count):
                block = ResidualBlock(c, 64 << stage, 2 if stage > 0 and b == 0 else 1, bottleneck)
                c = block.out_channels
                layers.append(block)
        self.blocks = nn.ModuleList(layers)
        self.classifier = nn.Linear(c, num_classes)

    def forward(self, x):
        x = F.relu(self.stem_norm(self.stem(x)))
        if not self.small_stem:
            x = F.max_pool2d(x, 3, 2, 1)
        for block in self.blocks:
            x = block(x)
        return self.classifier(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class Mlp(nn.Module):
    """worker/models/mlp.cc MlpImpl with GELU and no dropout: a Linear per hidden width,
    then one to the classes; images are taken as vectors of all their pixels. LibTorch's
    Linear initialises as Python's does."""

    def __init__(self, input_dim, hidden, num_classes):
        super().__init__()
        widths = [input_dim, *hidden, num_classes]
        self.layers = nn.ModuleList(nn.Linear(i, o) for i, o in zip(widths, widths[1:]))

    def forward(self, inputs):
        x = inputs.flatten(1) if inputs.dim() > 2 else inputs
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if i != len(self.layers) - 1:
                x = F.gelu(x)
        return x


class Cnn(nn.Module):
    """worker/models/cnn.cc CnnImpl: per stage a 3x3 convolution (no bias), batch norm,
    ReLU and a 2x2 max-pool; then a hidden Linear with ReLU, dropout, and one to the
    classes. `image` is (channels, height, width)."""

    def __init__(self, channels, hidden, image, num_classes, dropout=0.0):
        super().__init__()
        self.dropout = dropout
        c, h, w = image
        self.convs, self.norms = nn.ModuleList(), nn.ModuleList()
        for out in channels:
            self.convs.append(nn.Conv2d(c, out, 3, padding=1, bias=False))
            self.norms.append(nn.BatchNorm2d(out))
            c, h, w = out, h // 2, w // 2
        self.hidden = nn.Linear(c * h * w, hidden)
        self.out = nn.Linear(hidden, num_classes)

    def forward(self, inputs):
        x = inputs
        for conv, norm in zip(self.convs, self.norms):
            x = F.max_pool2d(F.relu(norm(conv(x))), 2)
        x = F.relu(self.hidden(x.flatten(1)))
        return self.out(F.dropout(x, self.dropout, self.training) if self.dropout else x)
