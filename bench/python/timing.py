"""How both Python references time a training step: warm-up steps, then windows of steps
between CUDA events (the host synchronizes only at each window's end)."""
import torch


def window_seconds(step, warmup, windows, window_steps):
    """Runs `step` warmup times, then returns the seconds of each of `windows` windows."""
    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    seconds = []
    for _ in range(windows):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(window_steps):
            step()
        end.record()
        end.synchronize()
        seconds.append(start.elapsed_time(end) / 1000)
    return seconds
