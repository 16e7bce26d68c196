"""A plain PyTorch DDP training script, written for torchrun and nothing else.

    torchrun --nproc_per_node=2 ddp_train.py --steps 400

runs as it is through Stoke (examples/scripts/ddp-train.yaml): Stoke's worker starts one
process per rank with torchrun's environment (RANK, WORLD_SIZE, MASTER_ADDR, ...), so the
script needs no change. It trains a small classifier on a synthetic task (which class
centre a noisy point lies nearest), saves a checkpoint every --checkpoint-every steps
into --checkpoint-dir ($STOKE_CHECKPOINT_DIR under Stoke, kept across a job's attempts),
and resumes from the newest one it finds there.
"""

import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F


def arguments():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--batch-size", type=int, default=64, help="per rank")
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--checkpoint-every", type=int, default=50)
    parser.add_argument("--checkpoint-dir",
                        default=os.environ.get("STOKE_CHECKPOINT_DIR", "checkpoints"))
    parser.add_argument("--step-delay", type=float, default=0.0,
                        help="seconds each step sleeps: slows a demo down to watch it")
    return parser.parse_args()


def batch(generator, centres, size):
    labels = torch.randint(0, centres.shape[0], (size,), generator=generator)
    points = centres[labels] + 4.0 * torch.randn(size, centres.shape[1], generator=generator)
    return points, labels


def latest_checkpoint(folder):
    steps = [int(name[5:-3]) for name in os.listdir(folder)
             if name.startswith("step-") and name.endswith(".pt")] if os.path.isdir(folder) else []
    return os.path.join(folder, f"step-{max(steps)}.pt") if steps else None


class Training:
    """The model, its optimizer and the task of one rank, resumed from a checkpoint."""

    def __init__(self, args):
        cuda = torch.cuda.is_available()
        dist.init_process_group("nccl" if cuda else "gloo")
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        self.device = (torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if cuda
                       else torch.device("cpu"))
        if cuda:
            torch.cuda.set_device(self.device)
        self.args = args
        torch.manual_seed(0)  # every rank builds the same model and task
        self.centres = torch.randn(10, 32) * 2
        self.model = nn.Sequential(nn.Linear(32, 128), nn.GELU(), nn.Linear(128, 10)).to(self.device)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=args.lr)
        self.start = 0
        path = latest_checkpoint(args.checkpoint_dir)
        if path is not None:
            state = torch.load(path, map_location=self.device)
            self.model.load_state_dict(state["model"])
            self.optimizer.load_state_dict(state["optimizer"])
            self.start = state["step"]
            if self.rank == 0:
                print(f"resumed from {path} at step {self.start}", flush=True)
        self.ddp = nn.parallel.DistributedDataParallel(self.model)
        self.generator = torch.Generator().manual_seed(1000 * self.start + self.rank)

    def step(self):
        """One optimizer step; the batch's loss and accuracy (tensors, not yet waited for)."""
        points, labels = batch(self.generator, self.centres, self.args.batch_size)
        logits = self.ddp(points.to(self.device))
        labels = labels.to(self.device)
        loss = F.cross_entropy(logits, labels)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        if self.args.step_delay:
            time.sleep(self.args.step_delay)
        return loss, (logits.argmax(1) == labels).float().mean()

    def save(self, step):
        """Rank 0 writes the checkpoint of `step`, whole or not at all."""
        if self.rank != 0:
            return
        os.makedirs(self.args.checkpoint_dir, exist_ok=True)
        final = os.path.join(self.args.checkpoint_dir, f"step-{step}.pt")
        torch.save({"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                    "step": step}, final + ".tmp")
        os.replace(final + ".tmp", final)

    def accuracy(self):
        points, labels = batch(torch.Generator().manual_seed(99), self.centres, 2000)
        with torch.no_grad():
            predicted = self.model(points.to(self.device)).argmax(1).cpu()
        return (predicted == labels).float().mean().item()


def main():
    args = arguments()
    training = Training(args)
    for step in range(training.start + 1, args.steps + 1):
        loss, _ = training.step()
        if training.rank == 0 and step % 50 == 0:
            print(f"step {step} loss {loss.item():.4f}", flush=True)
        if step % args.checkpoint_every == 0:
            training.save(step)
    if training.rank == 0:
        print(f"done: {args.steps} steps, accuracy {training.accuracy():.3f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
