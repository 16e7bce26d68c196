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
        "from stoke.job_spec import validate_request; "
        "print(len(validate_request({'training': {'precision': 'bf16'}}).job_file))"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], cwd=tmp_path, env=dict(env, PYTHONPATH=str(target)),
        check=True, capture_output=True, text=True, timeout=60,
    )
    where, text_length = result.stdout.split()
    assert Path(where).is_relative_to(target)
    assert text_length == "35"  # {"training": {"precision": "bf16"}}


def _tree(root: Path) -> dict:
    """Every file beneath `root` (bytecode caches aside) with its size and mtime."""
    return {
        str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in root.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and ".pytest_cache" not in p.parts
    }


def test_a_wheel_builds_without_touching_the_source_and_installs_in_a_fresh_venv(
    tmp_path: Path,
) -> None:
    source = REPO / "client" / "python"
    before = _tree(source)
    env = dict(os.environ, PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    env.pop("PYTHONPATH", None)
    wheels = tmp_path / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-build-isolation", "--no-deps",
         "--no-cache-dir", "-w", str(wheels), str(source)],
        check=True, env=env, capture_output=True, timeout=180,
    )
    assert _tree(source) == before, "building the wheel wrote into the source tree"
    [wheel] = list(wheels.glob("stoke-*.whl"))

    venv = tmp_path / "venv"
    # The venv sees Debian's grpcio, protobuf and PyYAML: there is no index to fetch from.
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)],
                   check=True, capture_output=True, timeout=120)
    subprocess.run([str(venv / "bin" / "pip"), "install", "--quiet", "--no-deps", str(wheel)],
                   check=True, env=env, capture_output=True, timeout=120)
    probe = "import stoke, stoke.aio, stoke.v1.coordinator_pb2_grpc; print(stoke.__file__)"
    result = subprocess.run([str(venv / "bin" / "python"), "-c", probe], cwd=tmp_path, env=env,
                            check=True, capture_output=True, text=True, timeout=60)
    assert Path(result.stdout.strip()).is_relative_to(venv)
    assert _tree(source) == before, "installing wrote into the source tree"
