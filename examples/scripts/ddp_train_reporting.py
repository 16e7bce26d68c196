"""examples/scripts/ddp_train.py, reporting to Stoke as it trains.

Under Stoke, stoke.report() sends the step, the loss and any other scalar to the job's
samples, `stoke watch`, /metrics (stoke_job_loss, stoke_job_reported{name="train_accuracy"})
and Grafana, without ever blocking the loop; stoke.should_stop() turns true when the job
is cancelled or preempted, so the script saves a checkpoint and leaves before SIGTERM.
Outside Stoke both do nothing, and the script runs under torchrun as the plain one does.
"""

import torch.distributed as dist

import stoke
from ddp_train import Training, arguments


def main():
    args = arguments()
    training = Training(args)
    for step in range(training.start + 1, args.steps + 1):
        loss, batch_accuracy = training.step()
        stop = stoke.should_stop()
        if training.rank == 0 and (step % 10 == 0 or stop):
            # .item() waits for the step; every 10th step is often enough.
            stoke.report(step=step, loss=loss.item(), total_steps=args.steps,
                         samples=10 * args.batch_size, train_accuracy=batch_accuracy.item())
        if step % args.checkpoint_every == 0 or stop:
            training.save(step)
        if stop:
            print(f"stopping at step {step}: checkpoint saved", flush=True)
            return
    accuracy = training.accuracy()
    if training.rank == 0:
        stoke.report(step=args.steps, accuracy=accuracy)
        print(f"done: {args.steps} steps, accuracy {accuracy:.3f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
