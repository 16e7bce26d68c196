"""A watch that outlives its coordinator: killed mid-job, started again on the same data.
The job's worker trains on meanwhile, so the job carries on in its first attempt."""

from __future__ import annotations

from pathlib import Path

import stoke
from conftest import Coordinator, endless_job
from stoke import JobState


def test_watch_resumes_across_a_coordinator_restart_without_gaps_or_repeats(tmp_path: Path) -> None:
    coordinator = Coordinator(tmp_path / "data").start()
    try:
        with stoke.Client(coordinator.address, reconnect_for=60) as client:
            job = client.submit(endless_job())
            seen = []
            restarted = False
            metrics_after = 0
            for event in job.watch():
                seen.append(event)
                if isinstance(event, stoke.Metrics) and not restarted:
                    # SIGKILL mid-training, then the same data dir and port again. The
                    # iterator is suspended meanwhile; its stream breaks underneath it.
                    coordinator.restart()
                    restarted = True
                elif isinstance(event, stoke.Metrics):
                    metrics_after += 1
                    if metrics_after == 3:
                        job.cancel("seen it train on")
            assert restarted

            # Every event once, in order, and exactly what a fresh watch replays.
            assert [e.seq for e in seen] == list(range(1, len(seen) + 1))
            replay = list(job.watch())
            assert [e.proto for e in seen] == [e.proto for e in replay]

            states = [(e.state, e.attempt) for e in seen if isinstance(e, stoke.StateChange)]
            assert (JobState.RUNNING, 1) in states, states
            assert max(attempt for _, attempt in states) == 1, states  # never started again
            assert states[-1][0] is JobState.CANCELLED
            assert job.refresh().state is JobState.CANCELLED
    finally:
        coordinator.stop()
