"""The Python reference for Stoke's multi-GPU benchmark: the same model, per-GPU batch and
synthetic data, trained with PyTorch best practice for data parallelism (torchrun +
DistributedDataParallel over NCCL, bf16 autocast, fused AdamW, TF32, channels_last for
CNNs). Prints one JSON line (rank 0): global samples/s, the median of timed windows
after warm-up, each timed with CUDA events.

DDP as its documentation recommends for a fixed model: static_graph=True (the set of
parameters that get gradients never changes, so DDP skips searching for unused ones and
can reorder buckets after the first step), gradient_as_bucket_view=True (gradients are
views into the all-reduce buckets: no copy in, no copy out), and broadcast_buffers=False
for the batch-norm network (each rank keeps its own running statistics, as Stoke's ranks
do, instead of rank 0 broadcasting them before every forward). --compile wraps the DDP
model in torch.compile (its DDPOptimizer splits the graph at bucket boundaries so that
all-reduce still overlaps backward); max-autotune-no-cudagraphs also searches matmul and
convolution kernels, without CUDA graphs (which DDP's hooks do not allow).

    torchrun --nproc-per-node N ddp_train.py --model gpt2-small --batch 16 [--compile default]
"""
import argparse
import json
import os
import statistics

import torch
import torch.distributed as dist
import torch.nn.functional as F

from models import Gpt, ResNet
from timing import window_seconds


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", choices=["gpt2-small", "resnet50"], required=True)
    parser.add_argument("--batch", type=int, required=True, help="per GPU")
    parser.add_argument("--warmup", type=int, default=30)
    parser.add_argument("--windows", type=int, default=8)
    parser.add_argument("--window-steps", type=int, default=20)
    parser.add_argument("--compile", choices=["none", "default", "max-autotune-no-cudagraphs"],
                        default="none", help="torch.compile mode for the DDP model")
    parser.add_argument("--static-graph", action=argparse.BooleanOptionalAction, default=True,
                        help="DDP's static_graph (--no-static-graph: off, should a torch "
                             "version's compiled DDP refuse it)")
    args = parser.parse_args()

    rank = int(os.environ.get("RANK", 0))
    world = int(os.environ.get("WORLD_SIZE", 1))
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    torch.cuda.set_device(local_rank)
    device = torch.device("cuda", local_rank)
    if world > 1:
        dist.init_process_group("nccl", device_id=device)
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    torch.backends.cudnn.benchmark = True
    torch.manual_seed(1)

    if args.model == "gpt2-small":
        context, vocab = 1024, 50304
        model = Gpt(12, 12, 768, context, vocab).to(device)
        inputs = torch.randint(0, vocab, (args.batch, context), device=device)
        targets = torch.randint(0, vocab, (args.batch, context), device=device)
        lr = 6e-4
    else:
        model = ResNet(50, 3, 1000).to(device).to(memory_format=torch.channels_last)
        inputs = torch.randn(args.batch, 3, 224, 224, device=device).to(
            memory_format=torch.channels_last)
        targets = torch.randint(0, 1000, (args.batch,), device=device)
        lr = 1e-3
    if world > 1:
        model = torch.nn.parallel.DistributedDataParallel(
            model, device_ids=[local_rank], bucket_cap_mb=25, gradient_as_bucket_view=True,
            static_graph=args.static_graph, broadcast_buffers=args.model != "resnet50")
    # The optimizer takes the parameters before compiling: torch.compile's wrapper shares
    # them, and the fused AdamW stays outside the compiled graph.
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, fused=True)
    if args.compile != "none":
        model = torch.compile(model, mode=None if args.compile == "default" else args.compile)

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = model(inputs)
        loss = F.cross_entropy(out.float().reshape(-1, out.shape[-1]), targets.reshape(-1))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    rates = [args.batch * world * args.window_steps / seconds
             for seconds in window_seconds(step, args.warmup, args.windows, args.window_steps)]
    if rank == 0:
        print(json.dumps({"runtime": "python-ddp", "model": args.model, "gpus": world,
                          "batch_per_gpu": args.batch, "compile": args.compile,
                          "static_graph": args.static_graph,
                          "samples_per_second": statistics.median(rates),
                          "peak_memory_gib": torch.cuda.max_memory_allocated() / 2**30,
                          "torch": torch.__version__}))
    if world > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
