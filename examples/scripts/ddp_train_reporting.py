"""examples/scripts/ddp_train.py, reporting to Stoke as it trains.

Under Stoke, stoke.report() sends the step, the loss and any other scalar to the job's
samples, `stoke watch`, /metrics (stoke_job_loss, stoke_job_reported{name="train_accuracy"})
and Grafana, without ever blocking the loop; stoke.should_stop() turns true when the job
is cancelled or preempted, so the script saves a checkpoint and leaves before SIGTERM.
Outside Stoke both do nothing, and the script runs under torchrun as the plain one does.
"""

import torch
import torch.distributed as dist

import stoke
from ddp_train import Training, arguments


def everyone_agrees(stop, device):
    """True on every rank once any rank was asked to stop."""
    flag = torch.tensor([1 if stop else 0], device=device)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return bool(flag.item())


def main():
    args = arguments()
    training = Training(args)
    for step in range(training.start + 1, args.steps + 1):
        loss, batch_accuracy = training.step()
        # Every rank stops after the same step: one that left alone would leave the others
        # waiting in their next all-reduce.
        stop = step % 10 == 0 and everyone_agrees(stoke.should_stop(), training.device)
        if training.rank == 0 and step % 10 == 0:
            # .item() waits for the step; every 10th step is often enough.
            stoke.report(step=step, loss=loss.item(), total_steps=args.steps,
                         samples=10 * args.batch_size, train_accuracy=batch_accuracy.item())
        if step % args.checkpoint_every == 0 or stop:
            training.save(step)
        if stop:
            if training.rank == 0:
                print(f"stopping at step {step}: checkpoint saved", flush=True)
            return
    accuracy = training.accuracy()
    if training.rank == 0:
        stoke.report(step=args.steps, accuracy=accuracy)
        print(f"done: {args.steps} steps, accuracy {accuracy:.3f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
