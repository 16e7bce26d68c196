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

Inside a script job, ``stoke.report``, ``stoke.should_stop``, ``stoke.checkpoint_dir`` and
``stoke.latest_checkpoint`` talk to the worker that runs the script (see stoke.in_job).
"""

import importlib
from typing import TYPE_CHECKING

# The in-job API needs only the standard library: a script job imports stoke in
# whatever Python it runs with, which need not have grpc or protobuf.
from stoke.in_job import checkpoint_dir, latest_checkpoint, report, should_stop

# The client's names, imported when first used (they need grpc and protobuf).
_CLIENT_NAMES = {
    "DEFAULT_ADDRESS": "stoke.client",
    "Checkpoint": "stoke.client",
    "Client": "stoke.client",
    "Export": "stoke.client",
    "AlreadyExists": "stoke.errors",
    "DeadlineExceeded": "stoke.errors",
    "FailedPrecondition": "stoke.errors",
    "InvalidArgument": "stoke.errors",
    "InvalidSpec": "stoke.errors",
    "NotFound": "stoke.errors",
    "PermissionDenied": "stoke.errors",
    "StokeError": "stoke.errors",
    "Unauthenticated": "stoke.errors",
    "Unavailable": "stoke.errors",
    "Evaluation": "stoke.events",
    "Event": "stoke.events",
    "LogLine": "stoke.events",
    "Metrics": "stoke.events",
    "StateChange": "stoke.events",
    "UnknownEvent": "stoke.events",
    "Job": "stoke.job",
    "JobState": "stoke.states",
    "JobSpec": "stoke.v1.job_spec_pb2",
}


def __getattr__(name: str) -> object:
    module = _CLIENT_NAMES.get(name)
    if module is None:
        raise AttributeError(f"module 'stoke' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


if TYPE_CHECKING:
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
    "checkpoint_dir",
    "latest_checkpoint",
    "report",
    "should_stop",
]
