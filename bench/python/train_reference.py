"""The Python reference for Stoke's single-GPU speed benchmark (bench/speed.sh): the same
network (models.py, layer for layer as worker/models/), batch, hyper-parameters and data
as the Stoke spec in bench/specs/, trained as PyTorch's performance guides teach: bf16
autocast, fused AdamW, TF32, cuDNN autotuning, channels_last for CNNs, gradients set to
None, no host reads in the loop. Modes: eager; torch.compile in each of its modes
(compile, compile-reduce-overhead, compile-max-autotune-no-cudagraphs,
compile-max-autotune; the last two autotune matrix-product and convolution kernels); and
the whole step (forward, backward, AdamW) captured once as one CUDA graph and replayed, as
PyTorch's CUDA notes teach ("whole-network capture"), of the eager model (cuda-graph), of
the compiled one (compile-cuda-graph) or of the max-autotune-no-cudagraphs one
(compile-max-autotune-cuda-graph): what Stoke's training.cuda_graph captures. After
warm-up it times --windows windows of --window-steps steps between CUDA events and prints
one JSON line: the median window's samples/s and step time, peak memory, and model FLOP/s
and MFU counted as Stoke counts them (TrainingFlopsPerSample in worker/models/). On
failure the line has "error" and the exit status is 1.

    python3 train_reference.py --model gpt2-small --batch 16 --mode compile
    python3 train_reference.py --model mlp --d 1024 --mode eager --fp32 --no-tf32 --adamw for-loop
    python3 train_reference.py --model python --spec bench/specs/py-vit.yaml --mode compile

With --model python the network is a Python model's, read from a Stoke job file (--spec):
its model.python file, factory, args and loss, its data.synthetic images or tokens and its
learning rate; FLOPs are counted as Stoke counts a Python model's (PyTorch's FLOP counter
on one forward and backward).
"""
import argparse
import contextlib
import gzip
import json
import math
import os
import statistics
import struct
import sys
import traceback

import torch
import torch.nn as nn
import torch.nn.functional as F

from models import Cnn, Gpt, Mlp, ResNet
from timing import window_seconds

PEAK_BF16_FLOPS = 989e12  # H100/H200 SXM dense bf16: the peak Stoke's MFU divides by
GPT_LAYERS, GPT_HEADS, GPT_WIDTH, GPT_CONTEXT, GPT_VOCAB = 12, 12, 768, 1024, 50304
MLP_CLASSES = 10
RESNET_IMAGE, RESNET_CLASSES = (3, 224, 224), 1000
CIFAR_IMAGE, CIFAR_CLASSES = (3, 32, 32), 10  # resnet34-cifar: CIFAR-sized synthetic images
# As bench/specs/fmnist-cnn.yaml has them.
CNN_CHANNELS, CNN_HIDDEN, CROP_PADDING, HORIZONTAL_FLIP = [32, 64], 128, 2, True
DEFAULT_BATCH = {"mlp": 512, "gpt2-small": 16, "resnet50": 256, "resnet34-cifar": 256,
                 "fmnist-cnn": 256}
# torch.compile's mode for each compiled mode; the *-cuda-graph modes capture the whole
# step by hand, so their compiled module must not make CUDA graphs of its own.
COMPILE_MODE = {"compile": "default", "compile-reduce-overhead": "reduce-overhead",
                "compile-max-autotune-no-cudagraphs": "max-autotune-no-cudagraphs",
                "compile-max-autotune": "max-autotune", "compile-cuda-graph": "default",
                "compile-max-autotune-cuda-graph": "max-autotune-no-cudagraphs"}
CAPTURED = ("cuda-graph", "compile-cuda-graph", "compile-max-autotune-cuda-graph")
# Modes whose compiled module replays CUDA graphs of its own (cudagraph trees).
GRAPH_TREES = ("compile-reduce-overhead", "compile-max-autotune")
MODES = ["eager", *COMPILE_MODE, "cuda-graph"]
SEED = 1  # Stoke's default training.seed


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", choices=["mlp", "gpt2-small", "resnet50", "resnet34-cifar",
                                            "fmnist-cnn", "python"],
                        required=True)
    parser.add_argument("--spec", help="--model python: the Stoke job file to take the "
                        "network, data and learning rate from")
    parser.add_argument("--d", type=int, default=256,
                        help="MLP width: d -> 4d -> d -> 10 on d synthetic features")
    parser.add_argument("--batch", type=int, help="default: 512, 16, 256, 256, 256 by model")
    parser.add_argument("--mode", choices=MODES, default="eager")
    parser.add_argument("--warmup", type=int, default=30, help="steps before timing")
    parser.add_argument("--windows", type=int, default=6)
    parser.add_argument("--window-steps", type=int, default=20)
    parser.add_argument("--data-dir", help="fmnist-cnn: folder with Fashion-MNIST's "
                        "train-images-idx3-ubyte and train-labels-idx1-ubyte (plain or .gz)")
    parser.add_argument("--no-tf32", action="store_true", help="fp32 products in full fp32")
    parser.add_argument("--fp32", action="store_true", help="no bf16 autocast")
    parser.add_argument("--trace", help="after the timed windows, write a Kineto trace "
                        "(Chrome JSON) of --trace-steps more steps here")
    parser.add_argument("--trace-steps", type=int, default=5)
    parser.add_argument("--memory-history", help="write every device allocation and free "
                        "of the run as a memory snapshot here (memory_peak.py reads it)")
    parser.add_argument("--adamw", choices=["fused", "foreach", "for-loop"], default="fused",
                        help="torch.optim.AdamW's implementation (for-loop: one parameter "
                        "at a time, as LibTorch's optim::AdamW)")
    args = parser.parse_args()
    if args.model == "python" and not args.spec:
        parser.error("--model python needs --spec")
    if args.batch is None:
        args.batch = (python_spec(args.spec)["training"]["batch_size"] if args.model == "python"
                      else DEFAULT_BATCH[args.model])
    if args.model == "fmnist-cnn" and not args.data_dir:
        parser.error("--model fmnist-cnn needs --data-dir")
    return args


# ---- FLOPs per training sample, as each worker/models/*.cc TrainingFlopsPerSample ----
# 6 FLOPs per multiply-add of the forward pass (2 forward, 4 backward).

def mlp_flops(model):
    return 6 * sum(layer.in_features * layer.out_features for layer in model.layers)


def cnn_flops(model, image):
    _, h, w = image
    macs = 0
    for conv in model.convs:  # each conv runs at its stage's input size, then pools 2x2
        macs += h * w * conv.in_channels * conv.out_channels * 9
        h, w = h // 2, w // 2
    macs += model.hidden.in_features * model.hidden.out_features
    macs += model.out.in_features * model.out.out_features
    return 6 * macs


def _out_size(size, kernel, stride, padding):
    return (size + 2 * padding - kernel) // stride + 1


def resnet_flops(model, image):
    _, h, w = image
    k, s = model.stem.kernel_size[0], model.stem.stride[0]
    h, w = _out_size(h, k, s, k // 2), _out_size(w, k, s, k // 2)
    macs = h * w * model.stem.in_channels * model.stem.out_channels * k * k
    if not model.small_stem:  # the ImageNet stem's max-pool
        h, w = _out_size(h, 3, 2, 1), _out_size(w, 3, 2, 1)
    for block in model.blocks:
        bh, bw = h, w
        for conv in block.convs:
            k, s = conv.kernel_size[0], conv.stride[0]
            bh, bw = _out_size(bh, k, s, k // 2), _out_size(bw, k, s, k // 2)
            macs += bh * bw * conv.in_channels * conv.out_channels * k * k
        if block.shortcut is not None:  # at the block's output resolution
            macs += bh * bw * block.shortcut.in_channels * block.shortcut.out_channels
        h, w = bh, bw
    macs += model.classifier.in_features * model.classifier.out_features
    return 6 * macs


def gpt_flops(model, layers, width, context):
    # PaLM (Chowdhery et al. 2022, appendix B) per token: 6 per weight, the position
    # embedding (a lookup) excluded, plus 12 * layers * width * context for attention.
    weights = sum(p.numel() for p in model.parameters())
    weights -= model.position_embedding.weight.numel()
    return context * (6 * weights + 12 * layers * width * context)


# ---- Data on the device, as worker/data/synthetic.cc and batch_prep.cc make it ----

def rule_generator():
    # synthetic.cc draws its rule from a CPU generator of its own, seeded seed ^ 0x5deece66d.
    return torch.Generator().manual_seed(SEED ^ 0x5DEECE66D)


def synthetic_vectors(features, classes, batch, device):
    """Random vectors labelled by a fixed random linear teacher."""
    teacher = torch.randn(features, classes, generator=rule_generator()).to(device)

    def next_batch():
        x = torch.randn(batch, features, device=device)
        return x, (x @ teacher).argmax(1)
    return next_batch


def synthetic_tokens(vocab, context, batch, device):
    """Sequences where each id is a fixed step after the previous, modulo the vocabulary."""
    step = 1 + int(torch.randint(max(1, vocab - 1), (1,), generator=rule_generator()))
    offsets = torch.arange(context + 1, device=device).view(1, -1) * step

    def next_batch():
        start = torch.randint(vocab, (batch, 1), device=device)
        sequence = (start + offsets).remainder(vocab)
        return sequence[:, :context], sequence[:, 1:]
    return next_batch


def synthetic_images(image, classes, batch, device):
    """Noise images (made NHWC, as the model wants them) whose channel means carry their
    random label: a fixed random offset per class and channel, half the noise's deviation."""
    offset = (0.5 * torch.randn(classes, image[0], generator=rule_generator())).to(device)

    def next_batch():
        y = torch.randint(classes, (batch,), device=device)
        x = torch.empty(batch, *image, device=device, memory_format=torch.channels_last)
        return x.normal_().add_(offset[y].view(batch, image[0], 1, 1)), y
    return next_batch


def read_idx(directory, name):
    """One idx file (MNIST's format: big-endian header, then uint8 data), plain or .gz."""
    for path in (os.path.join(directory, name), os.path.join(directory, name + ".gz")):
        if os.path.exists(path):
            with (gzip.open if path.endswith(".gz") else open)(path, "rb") as f:
                data = f.read()
            break
    else:
        raise FileNotFoundError(f"no {name} or {name}.gz in {directory}")
    if len(data) < 4 or data[0] != 0 or data[1] != 0 or data[2] != 0x08:
        raise ValueError(f"{path}: not an idx file of unsigned bytes")
    dims = struct.unpack(f">{data[3]}I", data[4:4 + 4 * data[3]])
    header = 4 + 4 * data[3]
    if len(data) - header != math.prod(dims):
        raise ValueError(f"{path}: {len(data) - header} bytes of data for shape {dims}")
    return torch.frombuffer(bytearray(data), dtype=torch.uint8, offset=header).view(dims)


def fashion_mnist(directory, batch, device):
    """The whole training split held on the device as uint8; each step a random batch,
    cropped after zero-padding, flipped and normalised there (batch_prep.cc), with the
    channel statistics of the training split (worker/data/dataset.cc)."""
    images = read_idx(directory, "train-images-idx3-ubyte").unsqueeze(1)
    labels = read_idx(directory, "train-labels-idx1-ubyte").long()
    if images.shape[0] != labels.shape[0]:
        raise ValueError(f"{directory}: {images.shape[0]} images but {labels.shape[0]} labels")
    count, channels, h, w = images.shape
    # On the host, so that the float64 temporaries do not count in the device's peak.
    pixels = count * h * w
    wide = images.double()
    mean = wide.sum(dim=(0, 2, 3)) / pixels
    std = (wide.square().sum(dim=(0, 2, 3)) / pixels - mean * mean).clamp_min(1e-6).sqrt()
    del wide
    mean = (mean / 255).float().view(1, channels, 1, 1).to(device)
    std = (std / 255).float().view(1, channels, 1, 1).to(device)
    images, labels = images.to(device), labels.to(device)
    p = CROP_PADDING
    rows = torch.arange(h, device=device).view(1, h, 1)
    cols = torch.arange(w, device=device).view(1, 1, w)
    samples = torch.arange(batch, device=device).view(batch, 1, 1)

    def next_batch():
        index = torch.randint(count, (batch,), device=device)
        x, y = images[index].float().div_(255), labels[index]
        if p > 0:
            padded = F.pad(x, (p, p, p, p)).permute(0, 2, 3, 1)  # gather pixels, NHWC
            dy = torch.randint(0, 2 * p + 1, (batch, 1, 1), device=device)
            dx = torch.randint(0, 2 * p + 1, (batch, 1, 1), device=device)
            x = padded[samples, dy + rows, dx + cols].permute(0, 3, 1, 2)
        if HORIZONTAL_FLIP:
            flip = torch.rand(batch, 1, 1, 1, device=device) < 0.5
            x = torch.where(flip, x.flip(3), x)
        x = (x - mean) / std
        return x.contiguous(memory_format=torch.channels_last), y
    return next_batch, (channels, h, w), int(labels.max()) + 1


def python_spec(path):
    import yaml  # only --model python needs it
    with open(path) as f:
        return yaml.safe_load(f)


def build_python(args, device):
    """A Python model's network and synthetic data, as the job file names them."""
    import importlib.util
    spec = python_spec(args.spec)
    python = spec["model"]["python"]
    path = os.path.join(os.path.dirname(os.path.abspath(args.spec)), python["file"])
    # Imported as Stoke imports it (its folder on sys.path): torch.compile looks modules up
    # by name.
    sys.path.insert(0, os.path.dirname(path))
    module = importlib.import_module(os.path.basename(path)[:-3])
    model = getattr(module, python.get("factory", "build_model"))(**python.get("args", {}))
    synthetic = spec["data"]["synthetic"]
    if synthetic.get("vocab_size"):
        data = synthetic_tokens(synthetic["vocab_size"], synthetic["context"], args.batch, device)
    else:
        data = synthetic_images(tuple(synthetic["image_shape"]),
                                synthetic.get("num_classes", 10), args.batch, device)
    convolutional = any(isinstance(m, nn.Conv2d) for m in model.modules())
    lr = float(spec.get("optimizer", {}).get("lr", 1e-3))
    return model, data, lr, None, convolutional, python.get("loss", "cross_entropy") == "model"


def count_flops(loss_of, next_batch):
    """FLOPs per sample of one forward and backward on two samples, by PyTorch's FLOP
    counter: what Stoke counts for a Python model."""
    from torch.utils.flop_counter import FlopCounterMode
    inputs, targets = (t[:2] for t in next_batch())
    with torch.autocast("cuda", dtype=torch.bfloat16):
        with FlopCounterMode(display=False) as counter:
            loss_of(inputs, targets).backward()
    for p in loss_of.parameters():
        p.grad = None
    return counter.get_total_flops() / 2


def build(args, device):
    """(model, batch maker, learning rate, FLOPs per sample, convolutional?, computes its
    own loss?)."""
    if args.model == "python":
        return build_python(args, device)
    if args.model == "mlp":
        model = Mlp(args.d, [4 * args.d, args.d], MLP_CLASSES)
        data = synthetic_vectors(args.d, MLP_CLASSES, args.batch, device)
        return model, data, 1e-3, mlp_flops(model), False, False
    if args.model == "gpt2-small":
        model = Gpt(GPT_LAYERS, GPT_HEADS, GPT_WIDTH, GPT_CONTEXT, GPT_VOCAB)
        data = synthetic_tokens(GPT_VOCAB, GPT_CONTEXT, args.batch, device)
        return model, data, 6e-4, gpt_flops(model, GPT_LAYERS, GPT_WIDTH, GPT_CONTEXT), False, False
    if args.model == "resnet50":
        model = ResNet(50, RESNET_IMAGE[0], RESNET_CLASSES)
        data = synthetic_images(RESNET_IMAGE, RESNET_CLASSES, args.batch, device)
        return model, data, 1e-3, resnet_flops(model, RESNET_IMAGE), True, False
    if args.model == "resnet34-cifar":
        model = ResNet(34, CIFAR_IMAGE[0], CIFAR_CLASSES, small_stem=True)
        data = synthetic_images(CIFAR_IMAGE, CIFAR_CLASSES, args.batch, device)
        return model, data, 1e-3, resnet_flops(model, CIFAR_IMAGE), True, False
    data, image, classes = fashion_mnist(args.data_dir, args.batch, device)
    model = Cnn(CNN_CHANNELS, CNN_HIDDEN, image, classes)
    return model, data, 1e-3, cnn_flops(model, image), True, False


def whole_step_graph(train_step, next_batch, optimizer):
    """The whole training step as one CUDA graph (PyTorch's CUDA semantics notes, "whole-
    network capture"): warm up on a side stream, capture forward, backward and the
    optimizer step once with the gradients unset, so that backward allocates them from the
    graph's pool and every replay rewrites them (no zeroing); then each step copies the new
    batch into the captured inputs and replays. The optimizer must be capturable."""
    static_inputs, static_targets = (t.clone() for t in next_batch())
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):  # compiles, autotunes, allocates optimizer state
            optimizer.zero_grad(set_to_none=True)
            train_step(static_inputs, static_targets)
    torch.cuda.current_stream().wait_stream(side)
    optimizer.zero_grad(set_to_none=True)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        train_step(static_inputs, static_targets)

    def step():
        inputs, targets = next_batch()
        static_inputs.copy_(inputs)
        static_targets.copy_(targets)
        graph.replay()
    return step


class WithLoss(nn.Module):
    """The model and its loss as one module, so that torch.compile fuses the loss too.
    The loss in fp32, as Stoke's step_math.cc computes it; a model that computes its own
    (own_loss) is called with the targets."""

    def __init__(self, model, own_loss=False):
        super().__init__()
        self.model = model
        self.own_loss = own_loss

    def forward(self, inputs, targets):
        if self.own_loss:
            return self.model(inputs, targets)
        out = self.model(inputs)
        return F.cross_entropy(out.float().reshape(-1, out.shape[-1]), targets.reshape(-1))


def train(args, notes):
    device = torch.device("cuda", 0)
    # The legacy switches, as ddp_train.py (proven on torch 2.11); mixing them with the
    # newer fp32_precision API is an error in recent torch.
    torch.backends.cuda.matmul.allow_tf32 = not args.no_tf32
    torch.backends.cudnn.allow_tf32 = not args.no_tf32
    torch.backends.cudnn.benchmark = True
    torch.manual_seed(SEED)
    if args.memory_history:
        torch.cuda.memory._record_memory_history(context=None, max_entries=4_000_000)

    model, next_batch, lr, flops_per_sample, convolutional, own_loss = build(args, device)
    model = model.to(device)
    if convolutional:
        model = model.to(memory_format=torch.channels_last)
    parameters = sum(p.numel() for p in model.parameters())
    captured = args.mode in CAPTURED
    implementation = {"fused": {"fused": True}, "foreach": {"foreach": True},
                      "for-loop": {"foreach": False}}[args.adamw]
    # capturable: the step count stays on the device, so the update can be captured.
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0,
                                  capturable=captured, **implementation)

    loss_of = WithLoss(model, own_loss)
    if flops_per_sample is None:
        flops_per_sample = count_flops(loss_of, next_batch)
    if args.mode in COMPILE_MODE:
        # reduce-overhead and max-autotune capture forward and backward as CUDA graphs
        # (cudagraph trees); the fused optimizer, a few kernels, runs eagerly between replays.
        loss_of = torch.compile(loss_of, mode=COMPILE_MODE[args.mode])
    new_step = (torch.compiler.cudagraph_mark_step_begin
                if args.mode in GRAPH_TREES else lambda: None)
    # Autocast's cache of bf16 weights must be off while a graph is captured.
    autocast = (contextlib.nullcontext() if args.fp32
                else torch.autocast("cuda", dtype=torch.bfloat16, cache_enabled=not captured))

    def train_step(inputs, targets):
        with autocast:
            loss = loss_of(inputs, targets)
        loss.backward()
        optimizer.step()

    if captured:
        step = whole_step_graph(train_step, next_batch, optimizer)
        notes.append("whole step captured as one CUDA graph")
    else:
        def step():
            inputs, targets = next_batch()
            # Tells the CUDA graph trees a new iteration begins: last step's graph outputs
            # (the loss, the gradients, all dropped by now) may be overwritten.
            new_step()
            train_step(inputs, targets)
            optimizer.zero_grad(set_to_none=True)

    seconds = window_seconds(step, args.warmup, args.windows, args.window_steps)
    if args.trace:
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as trace:
            for _ in range(args.trace_steps):
                step()
            torch.cuda.synchronize()
        trace.export_chrome_trace(args.trace)
        notes.append(f"trace of {args.trace_steps} steps: {args.trace}")
    if args.memory_history:
        torch.cuda.memory._dump_snapshot(args.memory_history)
        torch.cuda.memory._record_memory_history(enabled=None)
        notes.append(f"memory history: {args.memory_history}")
    window = statistics.median(seconds)
    rate = args.batch * args.window_steps / window
    if "compile" in args.mode:
        try:
            from torch._dynamo.utils import counters
            breaks = sum(counters["graph_break"].values())
            notes.append(f"graph breaks: {breaks}")
            if args.mode in GRAPH_TREES:
                notes.append(f"cudagraph skips: {int(counters['inductor']['cudagraph_skips'])}")
        except Exception as e:  # counters are internal; their absence is no failure
            notes.append(f"no compile counters: {e}")
    return {
        "samples_per_second": rate,
        "step_ms": 1000 * window / args.window_steps,
        "peak_memory_bytes": torch.cuda.max_memory_allocated(),
        "tflops": flops_per_sample * rate / 1e12,
        "mfu": flops_per_sample * rate / PEAK_BF16_FLOPS,
        "flops_per_sample": flops_per_sample,
        "parameters": parameters,
        "windows_samples_per_second": [args.batch * args.window_steps / s for s in seconds],
    }


def main():
    args = parse_args()
    row = {"impl": f"python-{args.mode}", "model": args.model, "batch": args.batch}
    if args.model == "mlp":
        row["d"] = args.d
    if args.model == "python":
        row["spec"] = os.path.basename(args.spec)
    row.update(precision="fp32" if args.fp32 else "bf16", tf32=not args.no_tf32,
               adamw=args.adamw)
    notes = []
    try:
        row.update(train(args, notes))
    except Exception as e:  # compile failures, out of memory, missing data: say which
        traceback.print_exc(file=sys.stderr)
        message = (str(e).strip().splitlines() or [""])[0]
        row["error"] = f"{type(e).__name__}: {message}"[:300]
    row["notes"] = notes
    row["torch"] = torch.__version__
    row["gpu"] = torch.cuda.get_device_name() if torch.cuda.is_available() else None
    print(json.dumps(row), flush=True)
    sys.exit(1 if "error" in row else 0)


if __name__ == "__main__":
    main()
