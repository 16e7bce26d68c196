"""Jobs on a real coordinator with a CPU worker: submit, watch, wait, cancel, export."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

import stoke
from conftest import Coordinator, endless_job, tiny_job
from stoke import JobState


def test_a_job_trains_and_streams_typed_events_in_order(client: stoke.Client) -> None:
    job = client.submit(tiny_job(steps=60, interval=10))
    assert job.id and job.name == "tiny"
    assert job.spec.training.batch_size == 32  # the stored spec, defaults filled in

    events = list(job.watch())  # ends once the job has finished

    assert [e.seq for e in events] == list(range(1, len(events) + 1)), "numbered without gaps"
    states = [e.state for e in events if isinstance(e, stoke.StateChange)]
    assert states == [JobState.PENDING, JobState.SCHEDULED, JobState.RUNNING, JobState.SUCCEEDED]
    samples = [e for e in events if isinstance(e, stoke.Metrics) and e.eval is None]
    assert [s.step for s in samples] == [10, 20, 30, 40, 50, 60]
    assert all(s.total_steps == 60 and s.samples_per_second > 0 for s in samples)
    assert samples[-1].loss < samples[0].loss, "the model should learn"
    evaluations = [e for e in events if isinstance(e, stoke.Metrics) and e.eval is not None]
    assert len(evaluations) == 1, "one evaluation, at the end"
    assert 0.0 <= evaluations[0].eval.accuracy <= 1.0 and evaluations[0].eval.samples > 0
    assert all(e.time.tzinfo is not None for e in events)
    assert [e.time for e in events] == sorted(e.time for e in events)

    finished = job.wait(timeout=30)
    assert finished is job and job.state is JobState.SUCCEEDED and job.state.is_final
    assert job.last_event_seq == len(events)
    assert job.latest_eval == evaluations[0].eval
    assert job.latest_metrics is not None and job.latest_metrics.step == 60


def test_logs_and_metrics_read_what_the_job_has_so_far(client: stoke.Client) -> None:
    job = client.submit(tiny_job(steps=40, interval=10)).wait(timeout=60)
    lines = list(job.logs())
    assert lines and all(isinstance(line, stoke.LogLine) for line in lines)
    assert any(line.text.startswith("eval at step 40") for line in lines), [l.text for l in lines]
    assert [l.seq for l in job.logs(follow=True)] == [l.seq for l in lines], "a finished job's"

    samples = job.metrics()
    assert [s.step for s in samples if s.eval is None] == [10, 20, 30, 40]
    assert [s.step for s in samples if s.eval is not None] == [40]

    pandas = pytest.importorskip("pandas")
    frame = job.metrics(as_frame=True)
    assert isinstance(frame, pandas.DataFrame)
    assert list(frame["step"]) == [s.step for s in samples]
    assert frame["eval_accuracy"].notna().sum() == 1


def test_logs_follow_a_running_job_until_it_ends(client: stoke.Client) -> None:
    job = client.submit(tiny_job(steps=300, interval=50))
    followed = list(job.logs(follow=True))  # returns once the job has finished
    assert job.refresh().state is JobState.SUCCEEDED
    assert any(line.text.startswith("eval at step 300") for line in followed)


def test_watch_resumes_from_a_sequence_number_and_can_stop_early(client: stoke.Client) -> None:
    job = client.submit(tiny_job(steps=40, interval=5)).wait(timeout=60)
    full = list(job.watch())
    head = []
    for event in job.watch():
        head.append(event)
        if len(head) == 3:
            break  # leaving the loop closes the stream
    tail = list(job.watch(from_seq=4))
    assert [e.proto for e in head + tail] == [e.proto for e in full]
    assert tail[0].seq == 4


def test_submit_takes_a_job_file_path(client: stoke.Client, tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(
        "name: from-yaml\n"
        "model: {mlp: {hidden: [16]}}\n"
        "data: {synthetic: {features: 8}}\n"
        "optimizer: {adamw: , lr: 3e-3}\n"
        "training: {steps: 20, batch_size: 16, precision: fp32}\n"
    )
    job = client.submit(path).wait(timeout=60)
    assert job.state is JobState.SUCCEEDED, job.message
    assert job.name == "from-yaml"
    assert job.spec.optimizer.lr == pytest.approx(3e-3)
    assert job.spec.optimizer.WhichOneof("kind") == "adamw"


def test_cancel_stops_a_running_job(client: stoke.Client) -> None:
    job = client.submit(endless_job())
    for event in job.watch():
        if isinstance(event, stoke.StateChange) and event.state is JobState.RUNNING:
            break
    started = time.monotonic()
    cancelled = job.cancel(reason="enough")
    assert cancelled is job and job.state is JobState.CANCELLED
    assert job.wait(timeout=10).state is JobState.CANCELLED
    assert time.monotonic() - started < 10
    last = list(job.watch())[-1]
    assert isinstance(last, stoke.StateChange) and last.state is JobState.CANCELLED
    # The worker is free again.
    assert client.submit(tiny_job(steps=10)).wait(timeout=60).state is JobState.SUCCEEDED


def test_export_downloads_the_newest_checkpoint(client: stoke.Client, tmp_path: Path) -> None:
    spec = tiny_job(steps=30, interval=10)
    spec["checkpoint"] = {"interval_steps": 10, "keep": 2}
    job = client.submit(spec).wait(timeout=60)
    assert job.state is JobState.SUCCEEDED, job.message
    checkpoints = job.checkpoints()
    assert [c.step for c in checkpoints] == [20, 30], "the newest two are kept"

    exported = client.export(job, tmp_path / "model.pt")
    assert exported.step == 30
    data = (tmp_path / "model.pt").read_bytes()
    assert len(data) == exported.bytes > 0
    assert data[:2] == b"PK", "a TorchScript archive is a zip file"
    assert not (tmp_path / "model.pt.partial").exists()
    # A built-in model exports as TorchScript: PyTorch alone runs it, with the trained weights.
    torch = pytest.importorskip("torch")
    model = torch.jit.load(str(tmp_path / "model.pt"))
    batch, classes = model(torch.randn(5, 16)).shape
    assert batch == 5
    assert sum(p.numel() for p in model.parameters()) == 16 * 32 + 32 + 32 * classes + classes

    older = job.export(tmp_path / "older.pt", step=20)
    assert older.step == 20 and (tmp_path / "older.pt").stat().st_size == older.bytes
    with pytest.raises(stoke.NotFound, match="no checkpoint at step 10"):
        job.export(tmp_path / "gone.pt", step=10)
    assert not (tmp_path / "gone.pt").exists() and not (tmp_path / "gone.pt.partial").exists()


def test_cluster_lists_the_cpu_worker(client: stoke.Client, coordinator: Coordinator) -> None:
    cluster = client.cluster()
    assert len(cluster.workers) == 1
    worker = cluster.workers[0]
    assert worker.local and worker.pid > 0
    assert worker.device.type == stoke.v1.job_pb2.DEVICE_TYPE_CPU
    assert cluster.coordinator_version
