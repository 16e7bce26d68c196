"""Stoke's Python SDK: submit, watch, wait for and cancel training jobs on a coordinator.

    import stoke

    client = stoke.Client("127.0.0.1:50051")
    job = client.submit("examples/mlp-synthetic.yaml")   # or a dict, or a JobSpec
    for event in job.watch():                            # survives coordinator restarts
        if isinstance(event, stoke.Metrics):
            print(event.step, event.loss)
    print(job.wait().state, job.latest_eval)

Errors are :class:`StokeError` subclasses carrying the gRPC code and, for rejected
specs, the offending field. The generated messages and stubs are in ``stoke.v1``
(``stoke.v1.job_spec_pb2``, ``stoke.v1.coordinator_pb2_grpc``, ...).
"""

from stoke.client import DEFAULT_ADDRESS, Checkpoint, Client, Export
from stoke.errors import (
    AlreadyExists,
    DeadlineExceeded,
    FailedPrecondition,
    InvalidArgument,
    InvalidSpec,
    NotFound,
    PermissionDenied,
    StokeError,
    Unauthenticated,
    Unavailable,
)
from stoke.events import Evaluation, Event, LogLine, Metrics, StateChange, UnknownEvent
from stoke.job import Job
from stoke.job_spec import load_job_spec, parse_job_spec
from stoke.states import JobState
from stoke.v1.job_spec_pb2 import JobSpec

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_ADDRESS",
    "AlreadyExists",
    "Checkpoint",
    "Client",
    "DeadlineExceeded",
    "Evaluation",
    "Event",
    "Export",
    "FailedPrecondition",
    "InvalidArgument",
    "InvalidSpec",
    "Job",
    "JobSpec",
    "JobState",
    "LogLine",
    "Metrics",
    "NotFound",
    "PermissionDenied",
    "StateChange",
    "StokeError",
    "Unauthenticated",
    "Unavailable",
    "UnknownEvent",
    "load_job_spec",
    "parse_job_spec",
]
