"""A handle on one job: its last known state, and the calls that concern it."""

from __future__ import annotations

import datetime
import os
from typing import TYPE_CHECKING, Any, Iterator, List, Optional, Union

from stoke.events import Evaluation, Event, LogLine, Metrics
from stoke.states import JobState
from stoke.v1 import job_pb2, job_spec_pb2

if TYPE_CHECKING:  # the client imports this module; only the type is needed here
    from stoke.client import Checkpoint, Client, Export

__all__ = ["Job"]


class Job:
    """A job on a coordinator, as last read from it.

    The attributes are a snapshot: :meth:`refresh` reads the job again, :meth:`wait`
    and :meth:`cancel` refresh it as well. Obtain one from :meth:`Client.submit`,
    :meth:`Client.job` or :meth:`Client.list`.
    """

    def __init__(self, client: "Client", proto: job_pb2.Job) -> None:
        self._client = client
        self._proto = proto

    # --- the snapshot -------------------------------------------------------------

    @property
    def id(self) -> str:
        """The coordinator's id for the job (a decimal number, in submission order)."""
        return self._proto.id

    @property
    def name(self) -> str:
        return self._proto.spec.name

    @property
    def state(self) -> JobState:
        return JobState(self._proto.state)

    @property
    def message(self) -> str:
        """Why the job is in its state: a failure's error, a restart's cause."""
        return self._proto.message

    @property
    def owner(self) -> str:
        """Who submitted it (the token's name; empty on a coordinator without tokens)."""
        return self._proto.owner

    @property
    def spec(self) -> job_spec_pb2.JobSpec:
        """The spec as the coordinator stored it, defaults filled in."""
        return self._proto.spec

    @property
    def attempt(self) -> int:
        return self._proto.attempt

    @property
    def restarts(self) -> int:
        return self._proto.restarts

    @property
    def last_event_seq(self) -> int:
        """The newest event's sequence number (``watch(from_seq=...)`` counts in these)."""
        return self._proto.last_event_seq

    @property
    def create_time(self) -> datetime.datetime:
        return self._proto.create_time.ToDatetime(tzinfo=datetime.timezone.utc)

    @property
    def preemptions(self) -> int:
        """Times a job of higher priority stopped it (it resumed where it stopped)."""
        return self._proto.preemptions

    @property
    def queue_position(self) -> Optional[int]:
        """A queued job's place in the queue (1: next to start); ``None`` otherwise."""
        return self._proto.queue_position or None

    @property
    def predicted_start(self) -> Optional[datetime.datetime]:
        """When a queued job is predicted to start (from the running jobs' remaining steps
        and the jobs ahead); ``None`` when it is not queued or no prediction is known."""
        if not self._proto.HasField("predicted_start_time"):
            return None
        return self._proto.predicted_start_time.ToDatetime(tzinfo=datetime.timezone.utc)

    @property
    def latest_metrics(self) -> Optional[job_pb2.MetricSample]:
        """The newest training metric sample, or ``None`` before the first one."""
        return self._proto.latest_metrics if self._proto.HasField("latest_metrics") else None

    @property
    def latest_eval(self) -> Optional[Evaluation]:
        """The newest evaluation on held-out data, or ``None`` before the first one."""
        sample = self._proto.latest_eval
        if not self._proto.HasField("latest_eval") or not sample.HasField("eval"):
            return None
        return Evaluation.from_proto(sample.eval)

    @property
    def proto(self) -> job_pb2.Job:
        """The whole ``stoke.v1.Job`` (placement, times, ...)."""
        return self._proto

    # --- calls ----------------------------------------------------------------------

    def set_priority(self, priority: int) -> "Job":
        """Changes the job's priority (see :meth:`Client.set_priority`); returns ``self``."""
        self._proto = self._client.set_priority(self.id, priority).proto
        return self

    def refresh(self) -> "Job":
        """Reads the job from the coordinator again; returns ``self``."""
        self._proto = self._client.job(self.id).proto
        return self

    def watch(self, from_seq: int = 1, *, reconnect_for: Optional[float] = None) -> Iterator[Event]:
        """Iterates over the job's events, live, until it has finished.

        See :meth:`Client.watch`: the iterator survives a lost connection or a
        coordinator restart, resuming after the last event it yielded.
        """
        return self._client.watch(self.id, from_seq, reconnect_for=reconnect_for)

    def wait(self, timeout: Optional[float] = None) -> "Job":
        """Blocks until the job has reached a final state; returns ``self``, refreshed.

        A failed or cancelled job is returned like a successful one: check
        :attr:`state` (and :attr:`message`).

        Raises:
            DeadlineExceeded: ``timeout`` seconds passed first.
            Unavailable: the coordinator stayed unreachable (see :meth:`Client.watch`).
        """
        self._client.wait(self.id, timeout=timeout, after_seq=self.last_event_seq)
        return self.refresh()

    def logs(self, follow: bool = False) -> Iterator[LogLine]:
        """The job's log lines, oldest first: those logged so far, or with ``follow``, on
        as they come until the job has finished (as ``stoke logs -f``)."""
        last = None if follow else self._client.job(self.id).last_event_seq
        if last == 0:
            return
        for event in self.watch():
            if isinstance(event, LogLine):
                yield event
            if last is not None and event.seq >= last:
                return

    def metrics(self, *, as_frame: bool = False) -> Any:
        """The job's metric samples so far, oldest first: training samples and evaluations
        (those with ``eval`` set).

        Args:
            as_frame: a pandas ``DataFrame`` instead of a list, one row a sample: ``time``,
                ``step``, ``total_steps``, ``epoch``, ``loss``, ``samples_per_second``,
                ``learning_rate``, ``elapsed_seconds``, and ``eval_loss``,
                ``eval_accuracy``, ``eval_perplexity`` (NaN for training samples). Needs
                pandas, which the SDK itself does not.
        """
        last = self._client.job(self.id).last_event_seq
        samples: List[Metrics] = []
        if last > 0:
            for event in self.watch():
                if isinstance(event, Metrics):
                    samples.append(event)
                if event.seq >= last:
                    break
        if not as_frame:
            return samples
        try:
            import pandas  # noqa: PLC0415 (optional: only this call needs it)
        except ImportError as error:
            raise ImportError("Job.metrics(as_frame=True) needs pandas (pip install pandas)") from error
        nan = float("nan")
        return pandas.DataFrame(
            [
                {
                    "time": s.time,
                    "step": s.step,
                    "total_steps": s.total_steps,
                    "epoch": s.epoch,
                    "loss": nan if s.eval else s.loss,
                    "samples_per_second": s.samples_per_second,
                    "learning_rate": s.learning_rate,
                    "elapsed_seconds": s.elapsed_seconds,
                    "eval_loss": s.eval.loss if s.eval else nan,
                    "eval_accuracy": s.eval.accuracy if s.eval else nan,
                    "eval_perplexity": s.eval.perplexity if s.eval else nan,
                }
                for s in samples
            ]
        )

    def cancel(self, reason: str = "") -> "Job":
        """Cancels the job (queued: at once; running: its workers stop within seconds)."""
        self._proto = self._client.cancel(self.id, reason).proto
        return self

    def checkpoints(self) -> List["Checkpoint"]:
        """The job's checkpoints, oldest first."""
        return self._client.checkpoints(self.id)

    def export(self, path: Union[str, "os.PathLike[str]"], step: Optional[int] = None) -> "Export":
        """Downloads the model of a checkpoint (the newest unless ``step``) to ``path``."""
        return self._client.export(self.id, path, step=step)

    def __repr__(self) -> str:
        return f"Job(id={self.id!r}, name={self.name!r}, state={self.state})"
