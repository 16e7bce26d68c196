"""A ``WatchJob`` stream that outlives lost connections and coordinator restarts.

The coordinator numbers a job's events 1, 2, 3, ... and ``WatchJob(from_seq)`` replays
from any of them, so resuming is a new call from the last yielded ``seq`` + 1. Events
below that (a replay overlapping what was seen) are dropped: each comes out once, in
order. Only a lost connection is worth another try; any other failure (an unknown job)
is raised at once.
"""

from __future__ import annotations

import time
from typing import Any, Iterator, NamedTuple, Optional, Sequence, Tuple

import grpc

from stoke.errors import DeadlineExceeded, Unavailable, error_from_rpc
from stoke.events import Event, event_from_proto
from stoke.v1 import coordinator_pb2

__all__ = ["WatchTarget", "resumable_watch"]

# Failures a watch outlives: the connection went, or the coordinator is restarting.
_RETRYABLE = (
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.CANCELLED,
    grpc.StatusCode.DEADLINE_EXCEEDED,
)
_FIRST_BACKOFF = 0.2
_MAX_BACKOFF = 2.0


class WatchTarget(NamedTuple):
    """What a watch calls: the client's stub and channel, its metadata and address."""

    stub: Any  # coordinator_pb2_grpc.CoordinatorStub
    channel: grpc.Channel
    metadata: Sequence[Tuple[str, str]]
    address: str


def resumable_watch(
    target: WatchTarget,
    job_id: str,
    from_seq: int,
    *,
    reconnect_for: float,
    deadline: Optional[float],
) -> Iterator[Event]:
    """Yields the job's events from ``from_seq`` on until it has finished.

    Args:
        reconnect_for: seconds the coordinator may stay unreachable before
            :class:`Unavailable` is raised; counted from the last event received.
        deadline: a ``time.monotonic()`` value after which :class:`DeadlineExceeded`
            is raised, or ``None``.
    """
    next_seq = max(from_seq, 1)
    unreachable_since = time.monotonic()
    backoff = _FIRST_BACKOFF
    while True:
        remaining = None if deadline is None else max(deadline - time.monotonic(), 0.0)
        request = coordinator_pb2.WatchJobRequest(id=job_id, from_seq=next_seq)
        # No deadline unless the caller set one: a job may train for days.
        call = target.stub.WatchJob(request, metadata=target.metadata, timeout=remaining)
        delivered_any = False
        try:
            for proto in call:
                delivered_any = True
                if proto.seq < next_seq:
                    continue  # never yield one twice
                next_seq = proto.seq + 1
                yield event_from_proto(proto)
            return  # the job finished and every event was delivered
        except grpc.RpcError as error:
            failure = error
        finally:
            call.cancel()  # also when the caller leaves the loop early
        now = time.monotonic()
        if deadline is not None and now >= deadline:
            raise _timed_out(job_id)
        if failure.code() not in _RETRYABLE:
            raise error_from_rpc(failure) from failure
        if delivered_any:
            unreachable_since, backoff = now, _FIRST_BACKOFF
        _await_coordinator(target, job_id, unreachable_since + reconnect_for, deadline, failure)
        time.sleep(backoff)  # a coordinator that refuses at once is not asked in a tight loop
        backoff = min(backoff * 2, _MAX_BACKOFF)


def _await_coordinator(
    target: WatchTarget,
    job_id: str,
    give_up_at: float,
    deadline: Optional[float],
    failure: grpc.RpcError,
) -> None:
    """Waits until the channel is connected again, or raises."""
    limit = give_up_at if deadline is None else min(give_up_at, deadline)
    ready = grpc.channel_ready_future(target.channel)
    try:
        ready.result(timeout=max(limit - time.monotonic(), 0))
    except grpc.FutureTimeoutError:
        ready.cancel()  # stop following the channel's state
        if deadline is not None and time.monotonic() >= deadline:
            raise _timed_out(job_id) from None
        raise Unavailable(
            f"lost the coordinator at {target.address} while watching job {job_id}: "
            f"{failure.details()}",
            code=grpc.StatusCode.UNAVAILABLE,
        ) from failure


def _timed_out(job_id: str) -> DeadlineExceeded:
    return DeadlineExceeded(
        f"job {job_id} had not finished after the timeout", code=grpc.StatusCode.DEADLINE_EXCEEDED
    )
