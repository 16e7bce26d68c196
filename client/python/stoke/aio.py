"""The SDK for asyncio services: :class:`AsyncClient`, on ``grpc.aio``, with the surface of
:class:`stoke.Client`, each call a coroutine (iterators asynchronous).

Example::

    import asyncio
    import stoke.aio

    async def main():
        async with stoke.aio.AsyncClient() as client:
            job = await client.submit("examples/mlp-synthetic.yaml")
            async for event in job.watch():
                print(event)
            print((await job.wait()).latest_eval)

    asyncio.run(main())

Settings (address, token, CA), errors, events and the job's read-only properties are
those of the synchronous client; submissions carry a request id and are retried the
same way, and watches resume across a lost connection the same way.
"""

from __future__ import annotations

import asyncio
import datetime
import os
import time
import uuid
from pathlib import Path
from typing import Any, AsyncIterator, Iterable, List, Optional, Union

import grpc
import grpc.aio

from stoke.client import _SUBMIT_ATTEMPTS, Checkpoint, Export, TlsOption, _connection
from stoke.errors import StokeError, Unavailable, error_from_rpc
from stoke.events import Event, LogLine, Metrics, event_from_proto
from stoke.job import Job
from stoke.job_spec import SpecLike, problems_error, validate_request
from stoke.model_code import read_code
from stoke.states import StateLike, parse_states
from stoke.v1 import coordinator_pb2, coordinator_pb2_grpc, job_spec_pb2
from stoke.watch import _FIRST_BACKOFF, _MAX_BACKOFF, _RETRYABLE, _timed_out

__all__ = ["AsyncClient", "AsyncJob"]

AsyncJobRef = Union[Job, str, int]

_FORMATS = {
    None: "MODEL_FORMAT_UNSPECIFIED",
    "state_dict": "MODEL_FORMAT_STATE_DICT",
    "safetensors": "MODEL_FORMAT_SAFETENSORS",
    "torchscript": "MODEL_FORMAT_TORCHSCRIPT",
    "libtorch": "MODEL_FORMAT_LIBTORCH_ARCHIVE",
}


def _job_id(job: AsyncJobRef) -> str:
    return job.id if isinstance(job, Job) else str(job)


class AsyncJob(Job):
    """A job, as :class:`stoke.Job`, whose calls are coroutines."""

    _client: "AsyncClient"

    async def refresh(self) -> "AsyncJob":  # type: ignore[override]
        self._proto = (await self._client.job(self.id)).proto
        return self

    def watch(  # type: ignore[override]
        self, from_seq: int = 1, *, reconnect_for: Optional[float] = None
    ) -> AsyncIterator[Event]:
        return self._client.watch(self.id, from_seq, reconnect_for=reconnect_for)

    async def wait(self, timeout: Optional[float] = None) -> "AsyncJob":  # type: ignore[override]
        await self._client.wait(self.id, timeout=timeout, after_seq=self.last_event_seq)
        return await self.refresh()

    async def cancel(self, reason: str = "") -> "AsyncJob":  # type: ignore[override]
        self._proto = (await self._client.cancel(self.id, reason)).proto
        return self

    async def checkpoints(self) -> List[Checkpoint]:  # type: ignore[override]
        return await self._client.checkpoints(self.id)

    async def export(  # type: ignore[override]
        self, path: Union[str, "os.PathLike[str]"], step: Optional[int] = None
    ) -> Export:
        return await self._client.export(self.id, path, step=step)

    async def logs(self, follow: bool = False) -> AsyncIterator[LogLine]:  # type: ignore[override]
        last = None if follow else (await self._client.job(self.id)).last_event_seq
        if last == 0:
            return
        async for event in self.watch():
            if isinstance(event, LogLine):
                yield event
            if last is not None and event.seq >= last:
                return

    async def metrics(self) -> List[Metrics]:  # type: ignore[override]
        last = (await self._client.job(self.id)).last_event_seq
        samples: List[Metrics] = []
        if last > 0:
            async for event in self.watch():
                if isinstance(event, Metrics):
                    samples.append(event)
                if event.seq >= last:
                    break
        return samples


class AsyncClient:
    """A connection to a coordinator for asyncio code; arguments as :class:`stoke.Client`.

    Create it inside a running event loop (``grpc.aio`` binds its channel to it).
    """

    def __init__(
        self,
        address: Optional[str] = None,
        token: Optional[str] = None,
        tls: TlsOption = None,
        *,
        timeout: float = 10.0,
        reconnect_for: float = 60.0,
    ) -> None:
        connection = _connection(address, token, tls)
        self.address = connection.address
        self.timeout = timeout
        self.reconnect_for = reconnect_for
        self._metadata = connection.metadata
        if connection.credentials is None:
            self._channel = grpc.aio.insecure_channel(connection.target, options=connection.options)
        else:
            self._channel = grpc.aio.secure_channel(
                connection.target, connection.credentials, options=connection.options
            )
        self._stub = coordinator_pb2_grpc.CoordinatorStub(self._channel)

    async def close(self) -> None:
        """Closes the connection; open watches end."""
        await self._channel.close()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"AsyncClient({self.address!r})"

    # --- jobs -----------------------------------------------------------------------

    async def submit(self, spec: SpecLike, *, request_id: Optional[str] = None) -> AsyncJob:
        """As :meth:`stoke.Client.submit`: validated, queued, retried with its request id."""
        message = await self.read_job_spec(spec)
        request = coordinator_pb2.SubmitJobRequest(spec=message)
        if message.model.WhichOneof("kind") == "python":
            request.code.CopyFrom(read_code(message.model.python.file))
        elif message.HasField("command") and os.path.isdir(message.command.workdir):
            request.code.CopyFrom(read_code(message.command.workdir, field="command.workdir"))
        request.request_id = request_id or uuid.uuid4().hex
        for attempt in range(_SUBMIT_ATTEMPTS):
            if attempt > 0:
                await asyncio.sleep(0.5 * attempt)
            try:
                response = await self._stub.SubmitJob(
                    request, timeout=self.timeout, metadata=self._metadata
                )
                return AsyncJob(self, response.job)  # type: ignore[arg-type]
            except grpc.RpcError as error:
                retryable = error.code() in (
                    grpc.StatusCode.UNAVAILABLE,
                    grpc.StatusCode.DEADLINE_EXCEEDED,
                )
                if not retryable or attempt + 1 == _SUBMIT_ATTEMPTS:
                    raise error_from_rpc(error, spec=True) from error
        raise AssertionError("unreachable")

    async def validate(self, spec: SpecLike) -> List[coordinator_pb2.SpecProblem]:
        """As :meth:`stoke.Client.validate`: every problem, storing nothing."""
        request = validate_request(spec)
        response = await self._unary(self._stub.ValidateJob, request, spec=True)
        return list(response.problems)

    async def read_job_spec(self, spec: SpecLike) -> job_spec_pb2.JobSpec:
        """As :meth:`stoke.Client.read_job_spec`: the coordinator reads the dict or file."""
        if isinstance(spec, job_spec_pb2.JobSpec):
            return spec
        request = validate_request(spec)
        response = await self._unary(self._stub.ValidateJob, request, spec=True)
        if response.problems:
            raise problems_error(request, list(response.problems))
        return response.spec

    async def job(self, job: AsyncJobRef) -> AsyncJob:
        """Reads one job. Raises :class:`stoke.NotFound` for an unknown id."""
        request = coordinator_pb2.GetJobRequest(id=_job_id(job))
        return AsyncJob(self, await self._unary(self._stub.GetJob, request))  # type: ignore[arg-type]

    async def list(
        self,
        state: Optional[Union[StateLike, Iterable[StateLike]]] = None,
        page_size: int = 50,
        *,
        limit: Optional[int] = None,
    ) -> AsyncIterator[AsyncJob]:
        """Jobs, newest first, a page at a time as it goes (as :meth:`stoke.Client.list`)."""
        count = 0
        async for page in self.list_pages(state, page_size):
            for job in page:
                if limit is not None and count >= limit:
                    return
                count += 1
                yield job

    async def list_pages(
        self,
        state: Optional[Union[StateLike, Iterable[StateLike]]] = None,
        page_size: int = 50,
    ) -> AsyncIterator[List[AsyncJob]]:
        """Like :meth:`list`, one ``ListJobs`` page at a time."""
        if page_size <= 0:
            raise ValueError(f"page_size must be positive, not {page_size}")
        states = [f"JOB_STATE_{s.name}" for s in parse_states(state)]
        token = ""
        while True:
            request = coordinator_pb2.ListJobsRequest(
                states=states, page_size=page_size, page_token=token
            )
            response = await self._unary(self._stub.ListJobs, request)
            yield [AsyncJob(self, j) for j in response.jobs]  # type: ignore[arg-type]
            token = response.next_page_token
            if not token:
                return

    async def cancel(self, job: AsyncJobRef, reason: str = "") -> AsyncJob:
        """Cancels a job; returns it as the coordinator now has it."""
        request = coordinator_pb2.CancelJobRequest(id=_job_id(job), reason=reason)
        return AsyncJob(self, await self._unary(self._stub.CancelJob, request))  # type: ignore[arg-type]

    async def set_priority(self, job: AsyncJobRef, priority: int) -> AsyncJob:
        """Changes an unfinished job's priority (as :meth:`stoke.Client.set_priority`)."""
        request = coordinator_pb2.SetJobPriorityRequest(id=_job_id(job), priority=priority)
        return AsyncJob(self, await self._unary(self._stub.SetJobPriority, request))  # type: ignore[arg-type]

    async def watch(
        self, job: AsyncJobRef, from_seq: int = 1, *, reconnect_for: Optional[float] = None
    ) -> AsyncIterator[Event]:
        """A job's events from ``from_seq`` on, live, until it has finished; resumes after
        the last event yielded when the stream breaks (as :meth:`stoke.Client.watch`)."""
        async for event in self._watch(
            _job_id(job), from_seq, self.reconnect_for if reconnect_for is None else reconnect_for,
            deadline=None,
        ):
            yield event

    async def wait(
        self, job: AsyncJobRef, timeout: Optional[float] = None, *, after_seq: int = 0
    ) -> AsyncJob:
        """Until a job has reached a final state; then the job.

        Raises:
            DeadlineExceeded: it was still going after ``timeout`` seconds.
        """
        job_id = _job_id(job)
        deadline = None if timeout is None else time.monotonic() + timeout
        async for _ in self._watch(job_id, after_seq + 1, self.reconnect_for, deadline=deadline):
            pass
        return await self.job(job_id)

    async def checkpoints(self, job: AsyncJobRef) -> List[Checkpoint]:
        """The job's checkpoints on the coordinator's storage, oldest first."""
        request = coordinator_pb2.ListCheckpointsRequest(id=_job_id(job))
        response = await self._unary(self._stub.ListCheckpoints, request)
        return [
            Checkpoint(
                step=c.step,
                write_time=c.write_time.ToDatetime(tzinfo=datetime.timezone.utc),
                size_bytes=c.size_bytes,
                path=c.path,
            )
            for c in response.checkpoints
        ]

    async def export(
        self,
        job: AsyncJobRef,
        path: Union[str, "os.PathLike[str]"],
        step: Optional[int] = None,
        format: Optional[str] = None,
    ) -> Export:
        """Downloads a checkpoint's model to ``path``, whole or not at all (as
        :meth:`stoke.Client.export`)."""
        if format not in _FORMATS:
            raise ValueError(f"format {format!r}: expected one of {', '.join(f for f in _FORMATS if f)}")
        target = Path(path)
        partial = target.with_name(target.name + ".partial")
        request = coordinator_pb2.DownloadModelRequest(
            id=_job_id(job),
            step=step or 0,
            format=coordinator_pb2.ModelFormat.Value(_FORMATS[format]),
        )
        call = self._stub.DownloadModel(request, metadata=self._metadata)
        expected, written, got_step = 0, 0, 0
        partial.unlink(missing_ok=True)
        try:
            descriptor = os.open(
                partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644
            )
            with os.fdopen(descriptor, "wb") as out:
                async for chunk in call:
                    if chunk.total_bytes or chunk.step:  # only the first chunk says
                        expected, got_step = chunk.total_bytes, chunk.step
                    out.write(chunk.data)
                    written += len(chunk.data)
        except grpc.RpcError as error:
            partial.unlink(missing_ok=True)
            raise error_from_rpc(error) from error
        except BaseException:
            call.cancel()
            partial.unlink(missing_ok=True)
            raise
        if written != expected:
            partial.unlink(missing_ok=True)
            raise StokeError(
                f"{target}: received {written} of {expected} bytes", code=grpc.StatusCode.DATA_LOSS
            )
        os.replace(partial, target)
        return Export(path=target, step=got_step, bytes=written)

    async def cluster(self) -> coordinator_pb2.Cluster:
        """The workers (devices, state, current job, latest readings) and queue counts."""
        return await self._unary(self._stub.GetCluster, coordinator_pb2.GetClusterRequest())

    # --- plumbing -------------------------------------------------------------------

    async def _unary(self, method: Any, request: Any, *, spec: bool = False) -> Any:
        try:
            return await method(request, timeout=self.timeout, metadata=self._metadata)
        except grpc.RpcError as error:
            raise error_from_rpc(error, spec=spec) from error

    async def _watch(
        self, job_id: str, from_seq: int, reconnect_for: float, deadline: Optional[float]
    ) -> AsyncIterator[Event]:
        # As stoke.watch.resumable_watch: resume from the last yielded seq + 1, each event
        # once, retrying only a lost connection.
        next_seq = max(from_seq, 1)
        unreachable_since = time.monotonic()
        backoff = _FIRST_BACKOFF
        while True:
            remaining = None if deadline is None else max(deadline - time.monotonic(), 0.0)
            request = coordinator_pb2.WatchJobRequest(id=job_id, from_seq=next_seq)
            call = self._stub.WatchJob(request, metadata=self._metadata, timeout=remaining)
            delivered_any = False
            try:
                async for proto in call:
                    delivered_any = True
                    if proto.seq < next_seq:
                        continue
                    next_seq = proto.seq + 1
                    yield event_from_proto(proto)
                return
            except grpc.RpcError as error:
                failure = error
            finally:
                call.cancel()
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                raise _timed_out(job_id)
            if failure.code() not in _RETRYABLE:
                raise error_from_rpc(failure) from failure
            if delivered_any:
                unreachable_since, backoff = now, _FIRST_BACKOFF
            await self._await_coordinator(job_id, unreachable_since + reconnect_for, deadline, failure)
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, _MAX_BACKOFF)

    async def _await_coordinator(
        self, job_id: str, give_up_at: float, deadline: Optional[float], failure: grpc.RpcError
    ) -> None:
        limit = give_up_at if deadline is None else min(give_up_at, deadline)
        try:
            await asyncio.wait_for(
                self._channel.channel_ready(), timeout=max(limit - time.monotonic(), 0)
            )
        except asyncio.TimeoutError:
            if deadline is not None and time.monotonic() >= deadline:
                raise _timed_out(job_id) from None
            raise Unavailable(
                f"lost the coordinator at {self.address} while watching job {job_id}: "
                f"{failure.details()}",
                code=grpc.StatusCode.UNAVAILABLE,
            ) from failure

