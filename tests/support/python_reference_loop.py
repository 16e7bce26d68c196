"""The plain PyTorch eager loop a user would write, for comparing Stoke's loss curve with:
the same model (the user's file and factory), seed, optimizer and Fashion-MNIST batches in
Stoke's order when it neither shuffles nor augments (data.loader.shuffle: false), each
image scaled to [0, 1] and normalised by the training split's channel mean and standard
deviation as Stoke does. Prints the loss of every step, one JSON list.

    python3 python_reference_loop.py MODEL_FILE FASHION_MNIST_DIR STEPS BATCH LR
"""
import gzip
import importlib.util
import json
import struct
import sys

import torch
import torch.nn.functional as F


def read_idx(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    dims = struct.unpack(f">{data[3]}I", data[4:4 + 4 * data[3]])
    return torch.frombuffer(bytearray(data[4 + 4 * data[3]:]), dtype=torch.uint8).view(dims)


def main():
    model_file, data_dir, steps, batch, lr = sys.argv[1:6]
    steps, batch, lr = int(steps), int(batch), float(lr)
    images = read_idx(f"{data_dir}/train-images-idx3-ubyte.gz").unsqueeze(1)
    labels = read_idx(f"{data_dir}/train-labels-idx1-ubyte.gz").long()
    pixels = images.double()
    count = pixels.numel()
    mean = pixels.sum() / count
    std = torch.sqrt(torch.clamp(pixels.square().sum() / count - mean * mean, min=1e-6))
    mean, std = (mean / 255).float(), (std / 255).float()

    spec = importlib.util.spec_from_file_location("user_model", model_file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    torch.manual_seed(1)  # Stoke's default training.seed
    model = module.build_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.999), eps=1e-8,
                                  weight_decay=0.0)
    losses = []
    for step in range(steps):
        x = images[step * batch:(step + 1) * batch].float().div_(255)
        x = (x - mean) / std
        y = labels[step * batch:(step + 1) * batch]
        loss = F.cross_entropy(model(x).float(), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.item())
    print(json.dumps(losses))


if __name__ == "__main__":
    main()
