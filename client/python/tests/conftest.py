"""Fixtures: real stoke-coordinator processes (with real CPU workers) on loopback.

The binaries come from ``$STOKE_BIN_DIR`` (CTest sets it), else ``<repo>/build/bin``.
A missing binary fails the tests that need it rather than skipping them: a suite that
ran nothing must not look like a suite that passed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Callable, Iterator, List, Optional

import pytest

import stoke

REPO = Path(__file__).resolve().parents[3]
BIN_DIR = Path(os.environ.get("STOKE_BIN_DIR", REPO / "build" / "bin"))


def binary(name: str) -> Path:
    path = BIN_DIR / name
    if not path.exists():
        pytest.fail(f"{path} is missing: build it (ninja -C build {name}) or set STOKE_BIN_DIR")
    return path


def wait_for(condition: Callable[[], bool], timeout: float, interval: float = 0.1) -> bool:
    """Polls ``condition`` until it holds or ``timeout`` seconds pass."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if condition():
            return True
        time.sleep(interval)
    return condition()


class Coordinator:
    """A stoke-coordinator process on a temp data dir, with its local workers."""

    def __init__(self, data_dir: Path, local_workers: str = "cpu:1") -> None:
        self.data_dir = data_dir
        self.local_workers = local_workers
        self.address = ""
        self._process: Optional[subprocess.Popen] = None
        data_dir.mkdir(parents=True, exist_ok=True)

    def start(self, address: str = "127.0.0.1:0") -> "Coordinator":
        """Starts it (on ``address``) and waits until it answers and its workers attached."""
        address_file = self.data_dir / "coordinator.address"
        address_file.unlink(missing_ok=True)  # a killed coordinator leaves it behind
        command = [
            str(binary("stoke-coordinator")),
            "--address", address,
            "--data-dir", str(self.data_dir),
            "--local-workers", self.local_workers,
            "--metrics-address", "127.0.0.1:0",
            "--heartbeat-timeout", "6",
            # Tests check checkpoints at step intervals of jobs that run for seconds.
            "--min-checkpoint-seconds", "0",
            # Local workers outlive a coordinator by default; a test leaves none behind.
            "--stop-workers-on-exit",
        ]
        if self.local_workers != "0":
            command += ["--worker-binary", str(binary("stoke-worker"))]
        with open(self.data_dir / "coordinator.log", "ab") as log:
            self._process = subprocess.Popen(
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )

        def listening() -> bool:
            if self._process.poll() is not None:
                pytest.fail(f"the coordinator exited with {self._process.returncode}:\n{self.log()}")
            text = address_file.read_text().strip() if address_file.exists() else ""
            self.address = text
            return bool(text)

        if not wait_for(listening, 60):
            pytest.fail(f"the coordinator did not start within 60 s:\n{self.log()}")
        expected = int(self.local_workers.split(":")[1]) if ":" in self.local_workers else 0
        with stoke.Client(self.address) as client:

            def attached() -> bool:
                try:
                    return sum(w.local for w in client.cluster().workers) >= expected
                except stoke.Unavailable:
                    return False

            if not wait_for(attached, 60, interval=0.2):
                pytest.fail(f"the local workers did not attach within 60 s:\n{self.log()}")
        return self

    def kill(self) -> None:
        """SIGKILL, as a crash would leave things."""
        if self._process is not None:
            self._process.kill()
            self._process.wait()
            self._process = None

    def stop(self) -> None:
        if self._process is not None:
            self._process.send_signal(signal.SIGTERM)
            try:
                self._process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
            self._process = None

    def restart(self) -> None:
        """Kills it, then starts it again on the same data dir and port."""
        address = self.address
        self.kill()
        self.start(address)
        assert self.address == address

    def log(self) -> str:
        path = self.data_dir / "coordinator.log"
        return path.read_text(errors="replace")[-6000:] if path.exists() else "(no log)"


@pytest.fixture(autouse=True)
def no_user_settings(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    """Tests see neither the STOKE_* variables nor the config file of whoever runs them."""
    for variable in ("STOKE_ADDRESS", "STOKE_TOKEN", "STOKE_TLS_CA"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path_factory.mktemp("no-config")))


@pytest.fixture(scope="session")
def coordinator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Coordinator]:
    """One coordinator with one CPU worker, shared by the tests that train."""
    process = Coordinator(tmp_path_factory.mktemp("coordinator")).start()
    yield process
    process.stop()


@pytest.fixture(scope="session")
def idle_coordinator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Coordinator]:
    """A coordinator without workers: jobs stay queued, nothing trains."""
    process = Coordinator(tmp_path_factory.mktemp("idle"), local_workers="0").start()
    yield process
    process.stop()


@pytest.fixture
def client(coordinator: Coordinator) -> Iterator[stoke.Client]:
    with stoke.Client(coordinator.address) as c:
        yield c


@pytest.fixture
def idle_client(idle_coordinator: Coordinator) -> Iterator[stoke.Client]:
    with stoke.Client(idle_coordinator.address) as c:
        yield c


def tiny_job(steps: int = 60, interval: int = 10, name: str = "tiny") -> dict:
    """An MLP on synthetic data: trains in about a second on one CPU core."""
    return {
        "name": name,
        "model": {"mlp": {"hidden": [32]}},
        "data": {"synthetic": {"features": 16, "samples_per_epoch": 4096}},
        "optimizer": {"adamw": None, "lr": 0.01},
        "training": {"steps": steps, "batch_size": 32},
        "metrics": {"interval_steps": interval},
    }


def endless_job(name: str = "endless") -> dict:
    """Runs until cancelled."""
    return tiny_job(steps=1_000_000_000, interval=50, name=name)


# --- a suite that ran nothing has not passed -------------------------------------------

_passed: List[str] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == "call" and report.passed:
        _passed.append(report.nodeid)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if exitstatus == 0 and not _passed:
        session.exitstatus = pytest.ExitCode.NO_TESTS_COLLECTED
