"""Job states as a Python enum, and the conversions the SDK's arguments accept."""

from __future__ import annotations

import enum
from typing import Iterable, List, Optional, Union

__all__ = ["JobState", "StateLike", "parse_states"]


class JobState(enum.IntEnum):
    """Where a job is in its life; the values are ``stoke.v1.JobState``'s numbers.

    ``PENDING -> SCHEDULED -> RUNNING -> SUCCEEDED | FAILED | CANCELLED``, with
    ``RESTARTING`` between a failure and a retry, and ``PREEMPTED`` when a job of
    higher priority took its devices (it resumes from the step it stopped at).
    """

    UNSPECIFIED = 0
    PENDING = 1
    SCHEDULED = 2
    RUNNING = 3
    SUCCEEDED = 4
    FAILED = 5
    CANCELLED = 6
    RESTARTING = 7
    PREEMPTED = 8

    @property
    def is_final(self) -> bool:
        """True for the states a job never leaves: succeeded, failed, cancelled."""
        return self in (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED)

    @classmethod
    def parse(cls, value: "StateLike") -> "JobState":
        """``JobState.RUNNING``, ``3``, ``"running"`` and ``"JOB_STATE_RUNNING"`` all work.

        Raises:
            ValueError: the value names no job state.
        """
        if isinstance(value, JobState):
            return value
        if isinstance(value, int) and not isinstance(value, bool):
            return cls(value)
        if isinstance(value, str):
            name = value.strip().upper()
            name = name[len("JOB_STATE_"):] if name.startswith("JOB_STATE_") else name
            if name in cls.__members__ and name != "UNSPECIFIED":
                return cls[name]
        choices = ", ".join(s.name.lower() for s in cls if s is not cls.UNSPECIFIED)
        raise ValueError(f"unknown job state {value!r}; expected one of {choices}")

    def __str__(self) -> str:
        return self.name.lower()


StateLike = Union[JobState, int, str]


def parse_states(state: Optional[Union[StateLike, Iterable[StateLike]]]) -> List[JobState]:
    """One state, several, or ``None`` (all) as a list of :class:`JobState`."""
    if state is None:
        return []
    if isinstance(state, (JobState, int, str)):
        return [JobState.parse(state)]
    return [JobState.parse(s) for s in state]
