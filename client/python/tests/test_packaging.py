"""`pip install client/python` builds the stubs from proto/ and installs a working package."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from conftest import REPO


def test_pip_installs_a_package_that_imports_outside_the_checkout(tmp_path: Path) -> None:
    target = tmp_path / "site"
    env = dict(os.environ, PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    env.pop("PYTHONPATH", None)
    # The dependencies (grpcio, protobuf, PyYAML) come from the system: no index here.
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-build-isolation", "--no-deps",
         "--no-cache-dir", "--target", str(target), str(REPO / "client" / "python")],
        check=True, env=env, capture_output=True, timeout=120,
    )
    assert (target / "stoke" / "v1" / "coordinator_pb2_grpc.py").exists()
    assert (target / "stoke" / "py.typed").exists()
    probe = (
        "import stoke, stoke.v1.coordinator_pb2_grpc as g; "
        "print(stoke.__file__); "
        "print(stoke.load_job_spec({'training': {'precision': 'bf16'}}).training.precision)"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], cwd=tmp_path, env=dict(env, PYTHONPATH=str(target)),
        check=True, capture_output=True, text=True, timeout=60,
    )
    where, precision = result.stdout.split()
    assert Path(where).is_relative_to(target)
    assert precision == "3"  # PRECISION_BF16
