"""Seconds from process start (imports and compilation included, as a user pays them) to
the first evaluation at or above a target test accuracy, for a Stoke Fashion-MNIST recipe
(a job file such as examples/fashion-mnist-fast.yaml) trained in PyTorch Python: the same
CNN (bench/python/models.py), augmentation (random crop after zero-padding, horizontal
flips, normalisation by the training split's statistics), AdamW, warm-up and cosine
schedule, batch, epochs and evaluation interval, with the data held on the GPU. Prints one
line: "SECONDS STEP BEST_ACCURACY MODE", SECONDS being "never" when the target was not
reached."""
import time

START = time.monotonic()

import argparse  # noqa: E402
import contextlib  # noqa: E402
import math  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from models import Cnn  # noqa: E402
from train_reference import SEED, WithLoss, read_idx, whole_step_graph  # noqa: E402

MODES = ["eager", "compile", "cuda-graph", "compile-cuda-graph"]


# ---- The subset of YAML that Stoke's example job files use, so no YAML library is needed:
# block mappings by indentation, "key: value" scalars, flow {mappings} and [lists], comments.

def _scalar(text):
    text = text.strip()
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return {"true": True, "false": False}.get(text, text.strip("\"'"))


def _flow(text, i=0):
    """(value, next index) of the flow value at text[i]."""
    while text[i] == " ":
        i += 1
    if text[i] in "{[":
        closing, items, entries = "}" if text[i] == "{" else "]", {}, []
        i += 1
        while True:
            while text[i] in " ,":
                i += 1
            if text[i] == closing:
                return (items if closing == "}" else entries), i + 1
            if closing == "}":
                colon = text.index(":", i)
                key = text[i:colon].strip()
                items[key], i = _flow(text, colon + 1)
            else:
                value, i = _flow(text, i)
                entries.append(value)
    end = i
    while end < len(text) and text[end] not in ",}]":
        end += 1
    return _scalar(text[i:end]), end


def read_job_file(path):
    root, stack = {}, [(-1, None)]
    stack[0] = (-1, root)
    for raw in open(path):
        line = raw.split(" #")[0].rstrip() if not raw.lstrip().startswith("#") else ""
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        key, _, value = line.strip().partition(":")
        while stack[-1][0] >= indent:
            stack.pop()
        parent = stack[-1][1]
        if value.strip():
            parent[key] = _flow(value.strip())[0]
        else:
            parent[key] = {}
            stack.append((indent, parent[key]))
    return root


# ---- Training ----

def learning_rate(opt, step, total_steps):
    """worker/engine/step_math.cc LearningRateAt: linear warm-up, then cosine to
    min_lr_ratio (default 0.1) of the peak, or constant."""
    lr, warmup = opt["lr"], opt.get("warmup_steps", 0)
    if warmup > 0 and step <= warmup:
        return lr * step / warmup
    if opt.get("schedule", "cosine") == "constant":
        return lr
    floor = opt.get("min_lr_ratio", 0.1)
    progress = min(1.0, (step - warmup) / max(1.0, total_steps - warmup))
    return lr * (floor + (1.0 - floor) * 0.5 * (1.0 + math.cos(math.pi * progress)))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--spec", required=True, help="a Stoke job file (cnn on data.mnist)")
    parser.add_argument("--data-dir", required=True, help="Fashion-MNIST's idx files")
    parser.add_argument("--mode", choices=MODES, default="compile")
    parser.add_argument("--target", type=float, default=0.94)
    args = parser.parse_args()

    spec = read_job_file(args.spec)
    if "cnn" not in spec.get("model", {}) or "mnist" not in spec.get("data", {}):
        sys.exit(f"{args.spec}: only model.cnn on data.mnist is written in Python here")
    cnn, train_spec, opt = spec["model"]["cnn"], spec["training"], spec["optimizer"]
    augment = spec["data"].get("augment", {})
    if "adamw" not in opt:
        sys.exit(f"{args.spec}: optimizer: only adamw is written in Python here")
    batch, epochs = train_spec["batch_size"], train_spec["epochs"]
    eval_interval = spec.get("eval", {}).get("interval_steps", 0)

    device = torch.device("cuda", 0)
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    torch.backends.cudnn.benchmark = True
    torch.manual_seed(SEED)

    images = read_idx(args.data_dir, "train-images-idx3-ubyte").unsqueeze(1)
    labels = read_idx(args.data_dir, "train-labels-idx1-ubyte").long().to(device)
    test_images = read_idx(args.data_dir, "t10k-images-idx3-ubyte").unsqueeze(1)
    test_labels = read_idx(args.data_dir, "t10k-labels-idx1-ubyte").long().to(device)
    count, channels, h, w = images.shape
    pixels = images.double()
    mean, std = pixels.mean().item() / 255, pixels.std(correction=0).item() / 255
    if not augment.get("normalize", True):
        mean, std = 0.0, 1.0
    images, test_images = images.to(device), test_images.to(device)
    test_inputs = ((test_images.float() / 255 - mean) / std).contiguous(
        memory_format=torch.channels_last)

    pad, flip = augment.get("crop_padding", 0), augment.get("horizontal_flip", False)
    rows = torch.arange(h, device=device).view(1, h, 1)
    cols = torch.arange(w, device=device).view(1, 1, w)
    samples = torch.arange(batch, device=device).view(batch, 1, 1)

    def augmented(index):  # as worker/data/batch_prep.cc
        x = images[index].float().div_(255)
        if pad > 0:
            padded = F.pad(x, (pad, pad, pad, pad)).permute(0, 2, 3, 1)
            dy = torch.randint(0, 2 * pad + 1, (batch, 1, 1), device=device)
            dx = torch.randint(0, 2 * pad + 1, (batch, 1, 1), device=device)
            x = padded[samples, dy + rows, dx + cols].permute(0, 3, 1, 2)
        if flip:
            x = torch.where(torch.rand(batch, 1, 1, 1, device=device) < 0.5, x.flip(3), x)
        return ((x - mean) / std).contiguous(memory_format=torch.channels_last), labels[index]

    steps_per_epoch = count // batch  # whole batches, as Stoke's epoch sampler
    total_steps = steps_per_epoch * epochs
    order = iter(())

    def next_batch():
        nonlocal order
        index = next(order, None)
        if index is None:
            order = iter(torch.randperm(count, device=device)[:steps_per_epoch * batch]
                         .view(steps_per_epoch, batch))
            index = next(order)
        return augmented(index)

    model = Cnn(cnn["channels"], cnn["hidden"], (channels, h, w), int(labels.max()) + 1,
                dropout=cnn.get("dropout", 0.0))
    model = model.to(device).to(memory_format=torch.channels_last)
    captured = args.mode in ("cuda-graph", "compile-cuda-graph")
    adamw = opt["adamw"] or {}
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=torch.tensor(opt["lr"], device=device) if captured else opt["lr"],
        betas=(adamw.get("beta1", 0.9), adamw.get("beta2", 0.999)), eps=adamw.get("eps", 1e-8),
        weight_decay=opt.get("weight_decay", 0.0), fused=True, capturable=captured)
    loss_of = WithLoss(model)
    if "compile" in args.mode:
        loss_of = torch.compile(loss_of)
    autocast = (torch.autocast("cuda", dtype=torch.bfloat16, cache_enabled=not captured)
                if train_spec.get("precision", "bf16") == "bf16" else contextlib.nullcontext())

    def train_step(inputs, targets):
        with autocast:
            loss = loss_of(inputs, targets)
        loss.backward()
        optimizer.step()

    if captured:
        # The capture's warm-up steps update the weights too: at the schedule's first rate.
        for group in optimizer.param_groups:
            group["lr"].fill_(learning_rate(opt, 1, total_steps))
        step = whole_step_graph(train_step, next_batch, optimizer)
    else:
        def step():
            train_step(*next_batch())
            optimizer.zero_grad(set_to_none=True)

    def accuracy():
        model.eval()
        with torch.no_grad(), autocast:
            right = sum((model(x).argmax(1) == y).sum()
                        for x, y in zip(test_inputs.split(2000), test_labels.split(2000)))
        model.train()
        return right.item() / test_labels.numel()

    best = 0.0
    for n in range(1, total_steps + 1):
        rate = learning_rate(opt, n, total_steps)
        for group in optimizer.param_groups:
            if captured:
                group["lr"].fill_(rate)
            else:
                group["lr"] = rate
        step()
        if (eval_interval and n % eval_interval == 0) or n == total_steps:
            best = max(best, accuracy())
            if best >= args.target:
                print(f"{time.monotonic() - START:.2f} {n} {100 * best:.2f} {args.mode}")
                return
    print(f"never {total_steps} {100 * best:.2f} {args.mode}")


if __name__ == "__main__":
    main()
