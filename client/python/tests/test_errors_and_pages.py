"""Error mapping and paging, on a coordinator without workers (jobs stay queued)."""

from __future__ import annotations

import time

import grpc
import pytest

import stoke
from conftest import tiny_job
from stoke import JobState
from stoke.errors import split_field


def test_the_coordinator_naming_a_field_raises_invalid_spec_with_that_field(
    idle_client: stoke.Client,
) -> None:
    with pytest.raises(stoke.InvalidSpec) as caught:
        idle_client.submit(tiny_job(steps=0))
    error = caught.value
    assert error.code is grpc.StatusCode.INVALID_ARGUMENT
    assert error.field == "training.steps"
    assert error.details == "must be at least 1"
    assert str(error) == "training.steps: must be at least 1"
    assert isinstance(error, stoke.InvalidArgument) and isinstance(error, ValueError)

    spec = tiny_job()
    spec["optimizer"]["lr"] = -0.5
    with pytest.raises(stoke.InvalidSpec) as caught:
        idle_client.submit(spec)
    assert caught.value.field == "optimizer.lr"


def test_a_spec_the_grammar_rejects_is_never_stored(idle_client: stoke.Client) -> None:
    before = list(idle_client.list(page_size=1000))
    with pytest.raises(stoke.InvalidSpec) as caught:
        idle_client.submit({"training": {"stepz": 10}})
    assert caught.value.field == "training.stepz"
    assert caught.value.code is grpc.StatusCode.INVALID_ARGUMENT
    assert [j.id for j in idle_client.list(page_size=1000)] == [j.id for j in before]


def test_unknown_jobs_raise_not_found(idle_client: stoke.Client) -> None:
    for call in (
        lambda: idle_client.job("987654"),
        lambda: idle_client.cancel("987654"),
        lambda: list(idle_client.watch("987654")),
        lambda: idle_client.checkpoints("987654"),
    ):
        with pytest.raises(stoke.NotFound) as caught:
            call()
        assert caught.value.code is grpc.StatusCode.NOT_FOUND
        assert "987654" in str(caught.value)
        assert isinstance(caught.value, LookupError)


def test_list_walks_every_page_newest_first(idle_client: stoke.Client) -> None:
    submitted = [idle_client.submit(tiny_job(name=f"page-{i}")).id for i in range(5)]
    everything = [j.id for j in idle_client.list(page_size=1000)]
    assert set(submitted) <= set(everything)

    pages = [[j.id for j in page] for page in idle_client.list_pages(page_size=2)]
    assert all(len(page) == 2 for page in pages[:-1]) and 1 <= len(pages[-1]) <= 2
    walked = [job_id for page in pages for job_id in page]
    assert walked == everything, "the pages together are the whole list, once each"
    assert [int(i) for i in walked] == sorted((int(i) for i in walked), reverse=True)
    assert [j.id for j in idle_client.list(page_size=2, limit=3)] == everything[:3]


def test_list_filters_by_state(idle_client: stoke.Client) -> None:
    kept = idle_client.submit(tiny_job(name="stays-queued"))
    dropped = idle_client.submit(tiny_job(name="cancelled"))
    dropped.cancel()
    pending = {j.id: j for j in idle_client.list(state="pending", page_size=3)}
    cancelled = {j.id for j in idle_client.list(state=JobState.CANCELLED)}
    assert kept.id in pending and dropped.id not in pending
    assert all(j.state is JobState.PENDING for j in pending.values())
    assert dropped.id in cancelled and kept.id not in cancelled
    both = {j.id for j in idle_client.list(state=["pending", "cancelled"])}
    assert {kept.id, dropped.id} <= both
    with pytest.raises(ValueError, match="unknown job state 'asleep'"):
        list(idle_client.list(state="asleep"))


def test_cancelling_a_queued_job_takes_effect_at_once(idle_client: stoke.Client) -> None:
    job = idle_client.submit(tiny_job())
    assert job.state is JobState.PENDING
    assert job.cancel("changed my mind").state is JobState.CANCELLED
    assert job.wait(timeout=5).state is JobState.CANCELLED
    assert job.message == "changed my mind" or "changed my mind" in job.message


def test_a_queued_jobs_priority_changes_and_a_finished_ones_cannot(
    idle_client: stoke.Client,
) -> None:
    job = idle_client.submit(tiny_job(name="reprioritised"))
    assert job.queue_position is not None and job.queue_position >= 1
    assert job.predicted_start is None  # no worker: nothing to predict from
    assert job.set_priority(7).spec.resources.priority == 7
    assert idle_client.job(job.id).spec.resources.priority == 7
    job.cancel()
    with pytest.raises(stoke.FailedPrecondition, match="has already finished"):
        idle_client.set_priority(job.id, 1)


def test_wait_gives_up_after_its_timeout(idle_client: stoke.Client) -> None:
    job = idle_client.submit(tiny_job())  # no worker will ever take it
    started = time.monotonic()
    with pytest.raises(stoke.DeadlineExceeded) as caught:
        job.wait(timeout=1.0)
    assert 0.9 <= time.monotonic() - started < 5
    assert isinstance(caught.value, TimeoutError)
    job.cancel()


def test_an_unreachable_coordinator_raises_unavailable() -> None:
    # Port 1: only root could listen there, and nothing does.
    with stoke.Client("127.0.0.1:1", timeout=2) as client:
        with pytest.raises(stoke.Unavailable) as caught:
            client.cluster()
        assert isinstance(caught.value, ConnectionError)
        with pytest.raises(stoke.Unavailable):
            list(client.watch("1", reconnect_for=1.0))


@pytest.mark.parametrize(
    "message, field, rest",
    [
        ("spec.training.batch_size: at most 65536", "spec.training.batch_size", "at most 65536"),
        ("spec.model.cnn.channels[2]: must be positive", "spec.model.cnn.channels[2]", "must be positive"),
        ("id: required", "id", "required"),
        ("job 42 not found", None, "job 42 not found"),
        ("spec: the data at /x: cannot open", "spec", "the data at /x: cannot open"),
    ],
)
def test_split_field_reads_the_path_prefix(message: str, field: str, rest: str) -> None:
    assert split_field(message) == (field, rest)


def test_exporting_a_job_without_checkpoints_fails_and_writes_nothing(
    idle_client: stoke.Client, tmp_path
) -> None:
    job = idle_client.submit(tiny_job())
    assert job.checkpoints() == []
    with pytest.raises(stoke.FailedPrecondition, match="has no checkpoints yet"):
        job.export(tmp_path / "model.pt")
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(stoke.NotFound):
        idle_client.export("987654", tmp_path / "model.pt")
    assert list(tmp_path.iterdir()) == []
    job.cancel()
