"""The in-job API of script jobs: what a training script that Stoke runs can tell Stoke.

    import stoke

    start = 0
    if (path := stoke.latest_checkpoint()) is not None:
        start = load(path)                      # the script's own format
    for step in range(start, steps):
        loss = train_step()
        stoke.report(step=step, loss=loss.item(), samples=batch_size, accuracy=acc)
        if stoke.should_stop():                 # cancelled: save and leave
            save(os.path.join(stoke.checkpoint_dir(), f"step-{step}.pt"))
            break

Outside a Stoke job (plain ``python`` or ``torchrun``) every call is harmless:
``report`` does nothing, ``should_stop`` is False, and ``latest_checkpoint`` looks in
``$STOKE_CHECKPOINT_DIR`` if it is set. Nothing here needs more than the standard
library, so it works in any Python the job runs with.
"""

from __future__ import annotations

import atexit
import collections
import math
import os
import socket
import threading
from typing import Deque, Optional

__all__ = ["checkpoint_dir", "latest_checkpoint", "report", "should_stop"]

# Reports the worker has not yet taken, oldest dropped first: report() never waits.
_MAX_QUEUED = 10_000


class _Channel:
    """The local socket the worker hands the program (descriptor $STOKE_REPORT_FD).

    A writer thread sends queued reports; a reader thread waits for the worker's "stop".
    """

    def __init__(self, fd: int) -> None:
        self._socket = socket.socket(fileno=fd)
        self._queue: Deque[str] = collections.deque(maxlen=_MAX_QUEUED)
        self._wake = threading.Condition()
        self._closed = False
        self._sending = False
        self.stop = threading.Event()
        threading.Thread(target=self._write, name="stoke-report", daemon=True).start()
        threading.Thread(target=self._read, name="stoke-stop", daemon=True).start()
        atexit.register(self.flush)

    def put(self, line: str) -> None:
        with self._wake:
            self._queue.append(line)
            self._wake.notify()

    def flush(self, timeout: float = 2.0) -> None:
        """Waits (a little) for the queued reports to leave: at exit, none is lost."""
        with self._wake:
            self._wake.wait_for(
                lambda: (not self._queue and not self._sending) or self._closed, timeout)

    def _write(self) -> None:
        while True:
            with self._wake:
                self._wake.wait_for(lambda: bool(self._queue))
                lines = list(self._queue)
                self._queue.clear()
                self._sending = True
            try:
                self._socket.sendall("".join(lines).encode())
            except OSError:
                with self._wake:
                    self._closed = True
                    self._wake.notify_all()
                return
            with self._wake:
                self._sending = False
                self._wake.notify_all()

    def _read(self) -> None:
        data = b""
        while True:
            try:
                chunk = self._socket.recv(4096)
            except OSError:
                return
            if not chunk:
                return
            data += chunk
            if b"stop\n" in data:
                self.stop.set()
                return


_lock = threading.Lock()
_channel: Optional[_Channel] = None
_channel_pid: Optional[int] = None


def _the_channel() -> Optional[_Channel]:
    """The channel of this process, opened on first use; None outside a Stoke job."""
    global _channel, _channel_pid
    if _channel is not None and _channel_pid == os.getpid():
        return _channel
    text = os.environ.get("STOKE_REPORT_FD", "")
    with _lock:
        if _channel is not None and _channel_pid == os.getpid():
            return _channel
        if _channel_pid is not None or not text.isdigit():
            # Outside a job, or in a process forked from the one that opened it (a data
            # loader's worker): the socket is the parent's.
            return None
        try:
            _channel = _Channel(int(text))
        except OSError:
            return None
        _channel_pid = os.getpid()
        return _channel


def _number(name: str, value: object) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else ("nan" if value != value else
                                                         ("inf" if value > 0 else "-inf"))
    # A 0-dimensional tensor or a NumPy scalar: float() takes them (a tensor on a GPU
    # waits for the device here, so pass loss.item() only when you would anyway).
    try:
        return repr(float(value))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise TypeError(f"stoke.report: {name}={value!r} is not a number") from None


def report(step: Optional[int] = None, loss: Optional[float] = None, **scalars: object) -> None:
    """Reports the script's progress: it appears in ``stoke watch``, the job's samples,
    ``/metrics`` (``stoke_job_loss``, ``stoke_job_reported{name=...}``) and Grafana.

    Never blocks: the values are queued for a thread that hands them to the worker.
    ``step`` and ``loss`` are Stoke's own (the loss is averaged over each second's
    reports); so are ``total_steps``, ``epoch``, ``lr``, ``samples`` (samples this rank
    trained since its last report: Stoke turns them into samples/s), ``samples_per_second``
    and ``tokens_per_second``. Any other keyword is a scalar of the job's own, at most 32
    names a job. On a GPU, the CUDA allocator's memory figures are added.
    """
    channel = _the_channel()
    if channel is None:
        return
    parts = []
    if step is not None:
        parts.append(f"step={_number('step', step)}")
    if loss is not None:
        parts.append(f"loss={_number('loss', loss)}")
    for name, value in scalars.items():
        parts.append(f"{name}={_number(name, value)}")
    torch = __import__("sys").modules.get("torch")
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        parts.append(f"memory_allocated_bytes={torch.cuda.memory_allocated()}")
        parts.append(f"memory_reserved_bytes={torch.cuda.memory_reserved()}")
        parts.append(f"memory_peak_bytes={torch.cuda.max_memory_allocated()}")
    channel.put(" ".join(parts) + "\n")


def should_stop() -> bool:
    """True once Stoke wants the script to stop (the job was cancelled or preempted).

    Save a checkpoint and exit: SIGTERM follows halfway through the job's
    ``command.grace_seconds``, SIGKILL at their end.
    """
    channel = _the_channel()
    return channel is not None and channel.stop.is_set()


def checkpoint_dir() -> Optional[str]:
    """The job's checkpoint folder ($STOKE_CHECKPOINT_DIR): kept across attempts, so a
    restarted job finds what an earlier attempt saved. None outside a Stoke job."""
    return os.environ.get("STOKE_CHECKPOINT_DIR") or None


def latest_checkpoint() -> Optional[str]:
    """The newest file or folder in the checkpoint folder (by modification time; hidden
    names and ones ending in .tmp or .partial, which are still being written, left out),
    or None when there is none: the checkpoint to resume from."""
    folder = checkpoint_dir()
    if folder is None or not os.path.isdir(folder):
        return None
    newest: Optional[str] = None
    newest_time = -math.inf
    for entry in os.scandir(folder):
        if entry.name.startswith(".") or entry.name.endswith((".tmp", ".partial")):
            continue
        mtime = entry.stat(follow_symlinks=False).st_mtime
        if mtime > newest_time or (mtime == newest_time and newest is not None and
                                   entry.path > newest):
            newest, newest_time = entry.path, mtime
    return newest
