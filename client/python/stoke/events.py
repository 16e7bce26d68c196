"""Typed views of the events ``WatchJob`` streams: state changes, metric samples, log lines.

Each event keeps its sequence number (``seq``: 1, 2, 3, ... without gaps within a job),
its time, and the underlying ``stoke.v1.JobEvent`` in ``proto`` for fields the view does
not lift out (allocator bytes, diagnoses, ...).
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from typing import Optional

from stoke.states import JobState
from stoke.v1 import job_pb2

__all__ = [
    "Event",
    "StateChange",
    "Evaluation",
    "Metrics",
    "LogLine",
    "UnknownEvent",
    "event_from_proto",
]


@dataclass(frozen=True)
class Event:
    """What every event has.

    Attributes:
        seq: the event's number within its job; ``WatchJob(from_seq)`` counts in these.
        time: when the coordinator recorded it (UTC).
        proto: the event as received.
    """

    seq: int
    time: datetime.datetime
    proto: job_pb2.JobEvent = field(repr=False, compare=False)


@dataclass(frozen=True)
class StateChange(Event):
    """The job entered ``state``; ``message`` says why (a failure's error, say)."""

    state: JobState
    message: str
    attempt: int


@dataclass(frozen=True)
class Evaluation:
    """An evaluation on the held-out split.

    Attributes:
        loss: mean loss over the evaluated samples.
        accuracy: classifiers: fraction classified right (0 to 1).
        perplexity: language models: exp(loss).
        samples: how many held-out samples were evaluated.
    """

    loss: float
    accuracy: float
    perplexity: float
    samples: int

    @classmethod
    def from_proto(cls, result: job_pb2.EvalResult) -> "Evaluation":
        return cls(
            loss=result.loss,
            accuracy=result.accuracy,
            perplexity=result.perplexity,
            samples=result.samples,
        )


@dataclass(frozen=True)
class Metrics(Event):
    """A training metric sample from rank 0, or an evaluation when ``eval`` is set.

    Attributes:
        step: optimizer steps completed; ``total_steps`` is the number the job will run.
        loss: mean training loss over the steps since the previous sample.
        samples_per_second: across all ranks over the same window.
        eval: the evaluation this sample reports, or ``None`` for a training sample.
    """

    step: int
    total_steps: int
    epoch: int
    loss: float
    samples_per_second: float
    learning_rate: float
    elapsed_seconds: float
    eval: Optional[Evaluation]

    @property
    def sample(self) -> job_pb2.MetricSample:
        """Every field of the sample (step time split, memory, MFU, diagnoses, ...)."""
        return self.proto.metrics


@dataclass(frozen=True)
class LogLine(Event):
    """A line a rank of the job logged."""

    text: str
    rank: int


@dataclass(frozen=True)
class UnknownEvent(Event):
    """An event of a kind this SDK does not know (from a newer coordinator)."""


def event_from_proto(event: job_pb2.JobEvent) -> Event:
    """Wraps one ``stoke.v1.JobEvent`` in its typed view."""
    common = dict(
        seq=event.seq,
        time=event.time.ToDatetime(tzinfo=datetime.timezone.utc),
        proto=event,
    )
    kind = event.WhichOneof("kind")
    if kind == "state_change":
        change = event.state_change
        state = JobState(change.state) if change.state in JobState._value2member_map_ else (
            JobState.UNSPECIFIED
        )
        return StateChange(**common, state=state, message=change.message, attempt=change.attempt)
    if kind == "metrics":
        m = event.metrics
        return Metrics(
            **common,
            step=m.step,
            total_steps=m.total_steps,
            epoch=m.epoch,
            loss=m.loss,
            samples_per_second=m.samples_per_second,
            learning_rate=m.learning_rate,
            elapsed_seconds=m.elapsed_seconds,
            eval=Evaluation.from_proto(m.eval) if m.HasField("eval") else None,
        )
    if kind == "log":
        return LogLine(**common, text=event.log.text, rank=event.log.rank)
    return UnknownEvent(**common)
