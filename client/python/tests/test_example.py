"""examples/python/sweep.py runs a three-job sweep and names the best job correctly."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import stoke
from conftest import REPO, Coordinator
from stoke import JobState


def test_the_sweep_example_picks_the_job_with_the_best_eval_accuracy(
    coordinator: Coordinator, client: stoke.Client, tmp_path: Path
) -> None:
    spec = tmp_path / "sweep.yaml"
    spec.write_text(
        "name: sweep\n"
        "model: {mlp: {hidden: [32]}}\n"
        "data: {synthetic: {features: 16}}\n"
        "optimizer: {adamw: , lr: 0.001}\n"
        "training: {steps: 40, batch_size: 32}\n"
        "eval: {batches: 4}\n"
    )
    env = dict(os.environ, PYTHONPATH=str(REPO / "client" / "python"))
    result = subprocess.run(
        [sys.executable, str(REPO / "examples" / "python" / "sweep.py"),
         "--address", coordinator.address, "--spec", str(spec), "--lrs", "0.0001,0.003,0.03",
         "--timeout", "120", "--export", str(tmp_path / "best.pt")],
        env=env, capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    submitted = re.findall(r"submitted job (\d+)", result.stdout)
    assert len(submitted) == 3
    jobs = [client.job(job_id) for job_id in submitted]
    assert all(j.state is JobState.SUCCEEDED for j in jobs)
    assert sorted(j.spec.optimizer.lr for j in jobs) == [0.0001, 0.003, 0.03]
    best = max(jobs, key=lambda j: j.latest_eval.accuracy)
    assert f"best: job {best.id} " in result.stdout
    assert (tmp_path / "best.pt").stat().st_size > 0
