"""stoke.aio against a real coordinator: the asynchronous client does what the synchronous
one does (submit, watch, wait, list, logs, metrics, cancel, errors), and its watch
resumes across a coordinator restart without gaps or repeats."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

import stoke
import stoke.aio
from conftest import Coordinator, endless_job, tiny_job
from stoke import JobState


def test_a_job_submitted_watched_and_waited_for_asynchronously(coordinator: Coordinator) -> None:
    async def scenario() -> None:
        async with stoke.aio.AsyncClient(coordinator.address) as client:
            job = await client.submit(tiny_job(steps=40, interval=10, name="async"))
            assert isinstance(job, stoke.aio.AsyncJob) and job.name == "async"
            events = [event async for event in job.watch()]
            assert [e.seq for e in events] == list(range(1, len(events) + 1))
            states = [e.state for e in events if isinstance(e, stoke.StateChange)]
            assert states[-1] is JobState.SUCCEEDED
            done = await job.wait(timeout=30)
            assert done.state is JobState.SUCCEEDED and done.latest_eval is not None
            assert [s.step for s in await job.metrics() if s.eval is None] == [10, 20, 30, 40]
            lines = [line.text async for line in job.logs()]
            assert any(text.startswith("eval at step 40") for text in lines), lines
            listed = [j.id async for j in client.list(limit=20)]
            assert job.id in listed
            assert (await client.cluster()).workers

            endless = await client.submit(endless_job("async-endless"))
            cancelled = await endless.cancel("done here")
            assert cancelled.state in (JobState.CANCELLED, JobState.RUNNING, JobState.SCHEDULED)
            assert (await endless.wait(timeout=30)).state is JobState.CANCELLED

            with pytest.raises(stoke.NotFound):
                await client.job("987654")
            with pytest.raises(stoke.InvalidSpec) as refused:
                await client.submit({**tiny_job(), "training": {"steps": 10, "batch_size": -1}})
            assert refused.value.field

    asyncio.run(scenario())


def test_an_async_watch_resumes_across_a_coordinator_restart(tmp_path: Path) -> None:
    coordinator = Coordinator(tmp_path / "data").start()

    async def scenario() -> None:
        async with stoke.aio.AsyncClient(coordinator.address, reconnect_for=60) as client:
            job = await client.submit(endless_job())
            seen = []
            restarted = False
            after = 0
            async for event in job.watch():
                seen.append(event)
                if isinstance(event, stoke.Metrics) and not restarted:
                    await asyncio.get_running_loop().run_in_executor(None, coordinator.restart)
                    restarted = True
                elif isinstance(event, stoke.Metrics):
                    after += 1
                    if after == 3:
                        await job.cancel("seen it train on")
            assert restarted
            assert [e.seq for e in seen] == list(range(1, len(seen) + 1))
            assert seen[-1].state is JobState.CANCELLED

    try:
        asyncio.run(scenario())
    finally:
        coordinator.stop()
