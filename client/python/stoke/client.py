"""The connection to a Stoke coordinator and the calls of ``stoke.v1.Coordinator``."""

from __future__ import annotations

import datetime
import os
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, List, Optional, Tuple, Union

import grpc

from stoke.addresses import channel_target
from stoke.errors import StokeError, error_from_rpc
from stoke.events import Event
from stoke.job import Job
from stoke.job_spec import SpecLike, problems_error, validate_request
from stoke.model_code import read_code
from stoke.states import StateLike, parse_states
from stoke.v1 import coordinator_pb2, coordinator_pb2_grpc, job_spec_pb2
from stoke.watch import WatchTarget, resumable_watch

__all__ = ["Client", "Checkpoint", "Export", "DEFAULT_ADDRESS"]

# Tries of one submission whose answer may have been lost, as the CLI makes.
_SUBMIT_ATTEMPTS = 3

#: Where ``stoke-coordinator`` listens unless told otherwise (as the CLI assumes).
from stoke.settings import DEFAULT_ADDRESS, resolve

JobRef = Union[Job, str, int]
TlsOption = Union[bool, str, "os.PathLike[str]", grpc.ChannelCredentials, None]

@dataclass(frozen=True)
class Checkpoint:
    """A checkpoint on the coordinator's storage.

    Attributes:
        step: the optimizer step it was written at.
        write_time: when (UTC).
        size_bytes: its files together.
        path: where it lies on the coordinator's machine.
    """

    step: int
    write_time: datetime.datetime
    size_bytes: int
    path: str


@dataclass(frozen=True)
class Export:
    """What :meth:`Client.export` wrote: the checkpoint's step and the file's size."""

    path: Path
    step: int
    bytes: int


def _job_id(job: JobRef) -> str:
    return job.id if isinstance(job, Job) else str(job)


@dataclass(frozen=True)
class _Connection:
    """What a client needs to open its channel: one reading of the settings."""

    address: str
    metadata: Tuple[Tuple[str, str], ...]
    target: str
    options: List[Tuple[str, Any]]
    credentials: Optional[grpc.ChannelCredentials]


def _connection(address: Optional[str], token: Optional[str], tls: TlsOption) -> _Connection:
    """The address, token and CA given, else from the environment and the config file; the
    channel's target and options (the sync and the asyncio clients open the same)."""
    settings = resolve(address, token, None)
    metadata = (("authorization", f"Bearer {settings.token}"),) if settings.token else ()
    if tls is None and settings.tls_ca:
        tls = settings.tls_ca
    options: List[Tuple[str, Any]] = [
        ("grpc.max_receive_message_length", 16 * 1024 * 1024),
        ("grpc.keepalive_time_ms", 20_000),
        # Find a restarted coordinator within about two seconds.
        ("grpc.initial_reconnect_backoff_ms", 200),
        ("grpc.min_reconnect_backoff_ms", 200),
        ("grpc.max_reconnect_backoff_ms", 2_000),
    ]
    # A comma-separated list names a leader and its standbys.
    target, list_options = channel_target(settings.address)
    return _Connection(settings.address, metadata, target, options + list_options,
                       _credentials(tls))


def _credentials(tls: TlsOption) -> Optional[grpc.ChannelCredentials]:
    if tls is None or tls is False:
        return None
    if isinstance(tls, grpc.ChannelCredentials):
        return tls
    if tls is True:
        return grpc.ssl_channel_credentials()  # the system's root certificates
    return grpc.ssl_channel_credentials(root_certificates=Path(tls).read_bytes())


class Client:
    """A connection to a coordinator. Cheap to create; share one per process.

    Example::

        import stoke

        client = stoke.Client("127.0.0.1:50051")
        job = client.submit("examples/mlp-synthetic.yaml")
        for event in job.watch():
            print(event)
        print(job.wait().latest_eval)

    Each of ``address``, ``token`` and ``tls`` not given comes from where the ``stoke``
    CLI finds it (:mod:`stoke.settings`): ``$STOKE_ADDRESS``, ``$STOKE_TOKEN`` and
    ``$STOKE_TLS_CA``, then ``~/.config/stoke/config.yaml``.

    Args:
        address: ``host:port`` of the coordinator (several, comma-separated: a leader and
            its standbys); default as above, else ``127.0.0.1:50051``.
        token: a bearer token, sent with every call as ``authorization: Bearer <token>``
            (``stoke token create`` makes one); a coordinator started with
            ``--auth-tokens`` refuses calls without a valid one. Over a channel without
            TLS the token travels in clear text.
        tls: ``None`` (default): TLS verified against ``$STOKE_TLS_CA`` or the config
            file's ``tls_ca`` when either names one, else plain TCP. ``False``: plain
            TCP. ``True``: TLS, verified against the system's root certificates. A path:
            TLS, verified against that CA bundle (PEM). A ``grpc.ChannelCredentials`` is
            used as given (e.g. for mutual TLS).
        timeout: deadline of each unary call, in seconds.
        reconnect_for: how long a watch keeps trying to reach the coordinator again
            after losing it, in seconds.
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
            self._channel = grpc.insecure_channel(connection.target, options=connection.options)
        else:
            self._channel = grpc.secure_channel(
                connection.target, connection.credentials, options=connection.options
            )
        self._stub = coordinator_pb2_grpc.CoordinatorStub(self._channel)

    # --- lifetime -------------------------------------------------------------------

    def close(self) -> None:
        """Closes the connection; open watches end."""
        self._channel.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Client({self.address!r})"

    # --- jobs -----------------------------------------------------------------------

    def submit(self, spec: SpecLike, *, request_id: Optional[str] = None) -> Job:
        """Validates and queues a job.

        Safe to retry, as ``stoke submit`` is: the request carries a request id (a random
        one unless given), and a call that fails as UNAVAILABLE or DEADLINE_EXCEEDED (the
        answer may have been lost) is sent again, up to 3 times, with the same id, so the
        coordinator never creates a second job for it.

        Args:
            spec: a ``stoke.v1.JobSpec``, a dict in the job-file format, or the path of a
                YAML/JSON job file (as ``stoke submit`` takes; see :mod:`stoke.job_spec`),
                which the coordinator reads (:meth:`read_job_spec`).
            request_id: the submission's id (at most 256 characters); a later submission
                with the same id and spec returns the job this one created.

        Returns:
            The job, with its id and its spec with defaults filled in.

        Raises:
            InvalidSpec: the spec is malformed. A dict's or a file's problems are all in
                ``error.problems`` (each with its line and column in the file);
                ``error.field`` names the first (``training.batch_size``).
        """
        message = self.read_job_spec(spec)
        request = coordinator_pb2.SubmitJobRequest(spec=message)
        if message.model.WhichOneof("kind") == "python":
            # The model's code travels with the job (model.python.file, read here).
            request.code.CopyFrom(read_code(message.model.python.file))
        elif message.HasField("command") and os.path.isdir(message.command.workdir):
            # A script job's folder here travels with it; one that is not here is taken as
            # a folder beneath a data root, which the workers reach.
            request.code.CopyFrom(read_code(message.command.workdir, field="command.workdir"))
        request.request_id = request_id or uuid.uuid4().hex
        for attempt in range(_SUBMIT_ATTEMPTS):
            if attempt > 0:
                time.sleep(0.5 * attempt)
            try:
                response = self._stub.SubmitJob(request, timeout=self.timeout, metadata=self._metadata)
                return Job(self, response.job)
            except grpc.RpcError as error:
                retryable = error.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
                if not retryable or attempt + 1 == _SUBMIT_ATTEMPTS:
                    raise error_from_rpc(error, spec=True) from error
        raise AssertionError("unreachable")

    def validate(self, spec: SpecLike) -> List[coordinator_pb2.SpecProblem]:
        """Every problem the coordinator finds with a job, storing nothing.

        The coordinator checks the job as a submission would: the file's grammar (the
        CLI's own), the spec's rules, the caller's rights and the data the job names.
        Model code is not read here; :meth:`submit` sends and checks it.

        Returns:
            ``stoke.v1.SpecProblem`` messages (``field``, ``message``, and ``line`` and
            ``column`` in the job file); empty when the job would be accepted.
        """
        request = validate_request(spec)
        return list(self._unary(self._stub.ValidateJob, request, spec=True).problems)

    def read_job_spec(self, spec: SpecLike) -> job_spec_pb2.JobSpec:
        """The ``JobSpec`` a dict or job file stands for, read by the coordinator.

        A ``JobSpec`` is returned as it is. A file's relative data and model paths come back
        resolved against the file's folder.

        Raises:
            InvalidSpec: with every problem the coordinator found (``error.problems``).
        """
        if isinstance(spec, job_spec_pb2.JobSpec):
            return spec
        request = validate_request(spec)
        response = self._unary(self._stub.ValidateJob, request, spec=True)
        if response.problems:
            raise problems_error(request, list(response.problems))
        return response.spec

    def job(self, job: JobRef) -> Job:
        """Reads one job. Raises :class:`NotFound` for an unknown id."""
        return Job(self, self._unary(self._stub.GetJob, coordinator_pb2.GetJobRequest(id=_job_id(job))))

    def list(
        self,
        state: Optional[Union[StateLike, Iterable[StateLike]]] = None,
        page_size: int = 50,
        *,
        limit: Optional[int] = None,
    ) -> Iterator[Job]:
        """Iterates over jobs, newest first, reading ``page_size`` at a time as it goes.

        Args:
            state: only jobs in this state (or these states): ``"running"``,
                ``JobState.PENDING``, ``["pending", "running"]``; default all.
            page_size: jobs per call (the coordinator caps it at 1000).
            limit: stop after this many jobs.
        """
        count = 0
        for page in self.list_pages(state, page_size):
            for job in page:
                if limit is not None and count >= limit:
                    return
                count += 1
                yield job

    def list_pages(
        self,
        state: Optional[Union[StateLike, Iterable[StateLike]]] = None,
        page_size: int = 50,
    ) -> Iterator[List[Job]]:
        """Like :meth:`list`, a page (one ``ListJobs`` call) at a time.

        Each page follows the previous one's ``next_page_token``, so jobs submitted while
        iterating do not shift the pages.
        """
        if page_size <= 0:
            raise ValueError(f"page_size must be positive, not {page_size}")
        states = [f"JOB_STATE_{s.name}" for s in parse_states(state)]
        token = ""
        while True:
            request = coordinator_pb2.ListJobsRequest(
                states=states, page_size=page_size, page_token=token
            )
            response = self._unary(self._stub.ListJobs, request)
            yield [Job(self, j) for j in response.jobs]
            token = response.next_page_token
            if not token:
                return

    def cancel(self, job: JobRef, reason: str = "") -> Job:
        """Cancels a job; returns it as the coordinator now has it."""
        request = coordinator_pb2.CancelJobRequest(id=_job_id(job), reason=reason)
        return Job(self, self._unary(self._stub.CancelJob, request))

    def set_priority(self, job: JobRef, priority: int) -> Job:
        """Changes an unfinished job's priority: its owner within the coordinator's
        ``--max-priority``, or an admin. Raised, it may preempt jobs of lower priority.

        Raises:
            PermissionDenied: above the caller's limit, or not the caller's job.
            FailedPrecondition: the job has finished.
        """
        request = coordinator_pb2.SetJobPriorityRequest(id=_job_id(job), priority=priority)
        return Job(self, self._unary(self._stub.SetJobPriority, request))

    def watch(
        self,
        job: JobRef,
        from_seq: int = 1,
        *,
        reconnect_for: Optional[float] = None,
    ) -> Iterator[Event]:
        """Iterates over a job's events from ``from_seq`` on, live, until it has finished.

        When the stream breaks (the network, a coordinator restart), the iterator
        reconnects and resumes after the last event it yielded: each event comes once,
        in ``seq`` order, none missing. Leaving the loop early closes the stream.

        Args:
            job: a :class:`Job` or a job id.
            from_seq: the first event to yield; 1 is the job's first.
            reconnect_for: give up after the coordinator has been unreachable this many
                seconds (default: the client's ``reconnect_for``).

        Raises:
            NotFound: no such job.
            Unavailable: the coordinator could not be reached for ``reconnect_for``.
        """
        return self._watch(_job_id(job), from_seq, reconnect_for, deadline=None)

    def wait(self, job: JobRef, timeout: Optional[float] = None, *, after_seq: int = 0) -> Job:
        """Blocks until a job has reached a final state, and returns it.

        Args:
            timeout: seconds; ``None`` waits as long as the job runs.
            after_seq: events up to this one are known to the caller and skipped.

        Raises:
            DeadlineExceeded: the job was still going after ``timeout`` seconds.
        """
        job_id = _job_id(job)
        deadline = None if timeout is None else time.monotonic() + timeout
        for _ in self._watch(job_id, after_seq + 1, None, deadline=deadline):
            pass
        return self.job(job_id)

    def checkpoints(self, job: JobRef) -> List[Checkpoint]:
        """The job's checkpoints on the coordinator's storage, oldest first."""
        request = coordinator_pb2.ListCheckpointsRequest(id=_job_id(job))
        response = self._unary(self._stub.ListCheckpoints, request)
        return [
            Checkpoint(
                step=c.step,
                write_time=c.write_time.ToDatetime(tzinfo=datetime.timezone.utc),
                size_bytes=c.size_bytes,
                path=c.path,
            )
            for c in response.checkpoints
        ]

    def export(
        self,
        job: JobRef,
        path: Union[str, "os.PathLike[str]"],
        step: Optional[int] = None,
        format: Optional[str] = None,
    ) -> Export:
        """Downloads a checkpoint's model to ``path``.

        The newest checkpoint unless ``step`` names one. The file appears whole or not at
        all: it is written to ``<path>.partial`` and renamed at the end. ``format``: by
        default the model's own (a Python model's ``state_dict``, which
        ``model.load_state_dict(torch.load(path))`` takes; a TorchScript model's scripted
        module, for ``torch.jit.load``; a built-in model's LibTorch archive, for
        ``torch::load`` in C++), or ``"state_dict"``, ``"safetensors"``,
        ``"torchscript"``, ``"libtorch"``.

        Raises:
            FailedPrecondition: the job has no checkpoint yet, or its model has no such
                export.
            NotFound: no such job, or no checkpoint at ``step``.
        """
        target = Path(path)
        partial = target.with_name(target.name + ".partial")
        formats = {None: "MODEL_FORMAT_UNSPECIFIED", "state_dict": "MODEL_FORMAT_STATE_DICT",
                   "safetensors": "MODEL_FORMAT_SAFETENSORS",
                   "torchscript": "MODEL_FORMAT_TORCHSCRIPT",
                   "libtorch": "MODEL_FORMAT_LIBTORCH_ARCHIVE"}
        if format not in formats:
            raise ValueError(f"format {format!r}: expected one of "
                             f"{', '.join(f for f in formats if f)}")
        request = coordinator_pb2.DownloadModelRequest(
            id=_job_id(job), step=step or 0,
            format=coordinator_pb2.ModelFormat.Value(formats[format]))
        call = self._stub.DownloadModel(request, metadata=self._metadata)
        expected, written, got_step = 0, 0, 0
        # A new file, never through a link planted at its name: what is there is removed.
        partial.unlink(missing_ok=True)
        try:
            descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW,
                                 0o644)
            with os.fdopen(descriptor, "wb") as out:
                for chunk in call:
                    if chunk.total_bytes or chunk.step:  # only the first chunk says
                        expected, got_step = chunk.total_bytes, chunk.step
                    out.write(chunk.data)
                    written += len(chunk.data)
        except grpc.RpcError as error:
            partial.unlink(missing_ok=True)
            raise error_from_rpc(error) from error
        except BaseException:
            call.cancel()  # no use receiving the rest
            partial.unlink(missing_ok=True)
            raise
        if written != expected:
            partial.unlink(missing_ok=True)
            raise StokeError(
                f"{target}: received {written} of {expected} bytes", code=grpc.StatusCode.DATA_LOSS
            )
        os.replace(partial, target)
        return Export(path=target, step=got_step, bytes=written)

    # --- the cluster ----------------------------------------------------------------

    def cluster(self) -> coordinator_pb2.Cluster:
        """The workers (devices, state, current job, latest readings) and queue counts."""
        return self._unary(self._stub.GetCluster, coordinator_pb2.GetClusterRequest())

    # --- plumbing -------------------------------------------------------------------

    def _unary(self, method: Callable[..., Any], request: Any, *, spec: bool = False) -> Any:
        try:
            return method(request, timeout=self.timeout, metadata=self._metadata)
        except grpc.RpcError as error:
            raise error_from_rpc(error, spec=spec) from error

    def _watch(
        self, job_id: str, from_seq: int, reconnect_for: Optional[float], deadline: Optional[float]
    ) -> Iterator[Event]:
        return resumable_watch(
            WatchTarget(self._stub, self._channel, self._metadata, self.address),
            job_id,
            from_seq,
            reconnect_for=self.reconnect_for if reconnect_for is None else reconnect_for,
            deadline=deadline,
        )
