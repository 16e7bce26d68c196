"""The in-job API of script jobs, against the socket a worker hands a script.

A child Python plays the script (a fresh interpreter, as a rank is), handed one end of a
real socket pair as a worker hands it (STOKE_REPORT_FD); the test plays the worker.
"""

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import stoke

SDK = str(Path(stoke.__file__).resolve().parents[1])

SCRIPT = """
import sys, time
import stoke
assert "grpc" not in sys.modules  # the in-job API needs none of the client's packages
stoke.report(step=1, loss=0.5, accuracy=True, lr=1e-3)
stoke.report(step=2, loss=float("nan"))
print("ready", stoke.should_stop(), flush=True)
for _ in range(500):
    if stoke.should_stop():
        print("stopping", flush=True)
        break
    time.sleep(0.01)
"""


def run_script(script: str, script_end: socket.socket) -> subprocess.Popen:
    """The script in a new interpreter, the socket's end at the descriptor it is told of."""
    fd = script_end.fileno()
    try:
        return subprocess.Popen(
            [sys.executable, "-c", script], pass_fds=(fd,), stdout=subprocess.PIPE, text=True,
            env={**os.environ, "PYTHONPATH": SDK, "STOKE_REPORT_FD": str(fd)})
    finally:
        script_end.close()


def test_reports_reach_the_worker_and_stop_reaches_the_script():
    worker_end, script_end = socket.socketpair()
    child = run_script(SCRIPT, script_end)
    assert child.stdout.readline().strip() == "ready False"
    received = b""
    worker_end.settimeout(10)
    while received.count(b"\n") < 2:
        received += worker_end.recv(4096)
    lines = received.decode().splitlines()
    assert lines[0] == "step=1 loss=0.5 accuracy=1 lr=0.001"
    assert lines[1] == "step=2 loss=nan"
    worker_end.sendall(b"stop\n")
    assert child.stdout.readline().strip() == "stopping"
    assert child.wait(10) == 0


def test_reports_never_wait_for_a_worker_that_does_not_read():
    worker_end, script_end = socket.socketpair()
    script = ("import time, stoke\nbegan = time.monotonic()\n"
              "for i in range(200000): stoke.report(step=i, loss=1.0)\n"
              "print(time.monotonic() - began, flush=True)\n")
    child = run_script(script, script_end)
    # 200,000 reports against a socket nobody reads: the loop is never held up.
    assert float(child.stdout.readline()) < 20
    worker_end.close()
    child.wait(10)


def test_outside_a_job_every_call_is_harmless(monkeypatch, tmp_path):
    monkeypatch.delenv("STOKE_REPORT_FD", raising=False)
    monkeypatch.delenv("STOKE_CHECKPOINT_DIR", raising=False)
    stoke.report(step=1, loss=0.1)
    assert stoke.should_stop() is False
    assert stoke.checkpoint_dir() is None
    assert stoke.latest_checkpoint() is None


def test_latest_checkpoint_is_the_newest_finished_one(monkeypatch, tmp_path):
    monkeypatch.setenv("STOKE_CHECKPOINT_DIR", str(tmp_path))
    assert stoke.latest_checkpoint() is None
    now = time.time()
    for name, age in [("step-100.pt", 30), ("step-200.pt", 20), ("step-300.pt.tmp", 0),
                      (".hidden", 0)]:
        (tmp_path / name).write_text("x")
        os.utime(tmp_path / name, (now - age, now - age))
    assert stoke.latest_checkpoint() == str(tmp_path / "step-200.pt")
