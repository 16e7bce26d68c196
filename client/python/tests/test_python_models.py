"""Python models through the SDK: the model's file travels with the spec and trains on a
real CPU worker; a missing file is refused naming the field, before anything is sent."""

from __future__ import annotations

from pathlib import Path

import pytest

import stoke
from stoke import JobState
from stoke.model_code import read_code

MODEL = """
import torch
from torch import nn

def build_model(width=32):
    return nn.Sequential(nn.Linear(16, width), nn.ReLU(), nn.Linear(width, 4))
"""


def python_job(file: Path, steps: int = 40) -> dict:
    return {
        "name": "own-model",
        "model": {"python": {"file": str(file), "args": {"width": 24}}},
        "data": {"synthetic": {"features": 16, "num_classes": 4}},
        "training": {"steps": steps, "batch_size": 32},
        "metrics": {"interval_steps": 10},
    }


def test_a_python_model_trains_with_its_code_sent_along(client: stoke.Client,
                                                       tmp_path: Path) -> None:
    model = tmp_path / "mymodel.py"
    model.write_text(MODEL)
    job = client.submit(python_job(model)).wait(timeout=120)
    assert job.state is JobState.SUCCEEDED, job.message
    python = job.spec.model.python
    assert python.module == "mymodel" and python.factory == "build_model"
    assert len(python.code_sha256) == 64 and python.code_bytes == len(MODEL)
    assert python.args["width"] == 24
    assert job.latest_eval is not None and job.latest_eval.accuracy > 0.4


def test_a_missing_model_file_is_refused_naming_the_field(idle_client: stoke.Client,
                                                         tmp_path: Path) -> None:
    with pytest.raises(stoke.InvalidSpec) as error:
        idle_client.submit(python_job(tmp_path / "absent.py"))
    assert error.value.field == "model.python.file"


def test_a_package_folder_is_read_without_caches_or_hidden_files(tmp_path: Path) -> None:
    package = tmp_path / "net"
    (package / "__pycache__").mkdir(parents=True)
    (package / ".git").mkdir()
    (package / "__init__.py").write_text("from .layers import build_model\n")
    (package / "layers.py").write_text(MODEL)
    (package / "__pycache__" / "layers.cpython-311.pyc").write_bytes(b"\0")
    (package / ".git" / "HEAD").write_text("ref")
    bundle = read_code(package)
    assert [f.path for f in bundle.files] == ["net/__init__.py", "net/layers.py"]
    (package / "link.py").symlink_to("/etc/hostname")
    with pytest.raises(stoke.InvalidSpec, match="symbolic link"):
        read_code(package)
