"""The SDK reads job files exactly as `stoke submit` does: same specs, same errors."""

from __future__ import annotations

import subprocess
import textwrap
from pathlib import Path
from typing import Tuple

import pytest

import stoke
from conftest import REPO, Coordinator, binary


def cli_submit(coordinator: Coordinator, path: Path) -> Tuple[int, str, str]:
    result = subprocess.run(
        [str(binary("stoke")), "--address", coordinator.address, "submit", str(path)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    return result.returncode, result.stdout.strip(), result.stderr.strip()


@pytest.mark.parametrize("name", sorted(p.name for p in (REPO / "examples").glob("*.yaml")))
def test_example_job_files_are_stored_alike(
    name: str, idle_coordinator: Coordinator, idle_client: stoke.Client
) -> None:
    path = REPO / "examples" / name
    code, out, err = cli_submit(idle_coordinator, path)
    try:
        ours = idle_client.submit(path)
    except stoke.InvalidSpec as error:  # data the coordinator cannot find: the same refusal
        assert code == 2, out
        *lines, _ = err.splitlines()
        assert "\n".join(lines) == str(error)
        return
    assert code == 0, err
    theirs = idle_client.job(out)
    assert ours.spec == theirs.spec, name
    ours.cancel()
    theirs.cancel()


@pytest.mark.parametrize(
    "text",
    [
        "training:\n  steps: 10\n  batchsize: 32\n",
        "training: {precision: fp8}\n",
        "training:\n  steps: -4\n",
        "model:\n  mlp: {}\n  cnn: {}\n",
        "model: mlp\n",
        "model:\n  mlp:\n    hidden: 64\n",
        "data:\n  augment:\n    normalize: maybe\n",
        "optimizer:\n  lr: fast\n",
        "data:\n  augment:\n    horizontal_flip: yes\n",
        "training: {tf32: maybe}\n",
        "name: x\ntrainer: {}\n",
    ],
)
def test_bad_job_files_get_the_same_message(
    text: str, tmp_path: Path, idle_coordinator: Coordinator, idle_client: stoke.Client
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(textwrap.dedent(text))
    code, _, err = cli_submit(idle_coordinator, path)
    with pytest.raises(stoke.InvalidSpec) as caught:
        idle_client.submit(path)
    assert code == 2
    # The CLI prints the problems, a line each, then how many; the SDK raises them.
    *lines, summary = err.splitlines()
    assert "\n".join(lines) == str(caught.value)
    assert summary == f"stoke: {path}: {len(lines)} problem{'' if len(lines) == 1 else 's'}; nothing was submitted"
