"""Exceptions of the Stoke SDK: one class per gRPC status a caller may want to handle.

Every failed call raises a :class:`StokeError` subclass that keeps the gRPC status code
and, where the coordinator named one, the offending field: its ``INVALID_ARGUMENT``
messages start with the field path (``spec.training.batch_size: must be ...``), and
:attr:`StokeError.field` holds that path. The subclasses also derive from the built-in
exception a Python caller would expect (``ValueError``, ``LookupError``,
``ConnectionError``, ``TimeoutError``, ``PermissionError``).
"""

from __future__ import annotations

import re
from typing import Dict, Optional, Type

import grpc

__all__ = [
    "StokeError",
    "InvalidArgument",
    "InvalidSpec",
    "NotFound",
    "AlreadyExists",
    "FailedPrecondition",
    "Unavailable",
    "DeadlineExceeded",
    "Unauthenticated",
    "PermissionDenied",
    "error_from_rpc",
]

# "spec.training.batch_size: must be ..." or "states[1]: ..." (a path, then ": ").
_FIELD_PREFIX = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*(?:\[\d+\])*(?:\.[A-Za-z_][A-Za-z0-9_]*(?:\[\d+\])*)*): ")


class StokeError(Exception):
    """A call to the coordinator, or the preparation of one, failed.

    Attributes:
        code: the gRPC status code, or ``None`` for errors found before any call (a job
            file that does not parse).
        details: the coordinator's message (or the local problem), without the field.
        field: the path of the offending field (``spec.optimizer.lr``), when known.
    """

    def __init__(
        self,
        details: str,
        *,
        code: Optional[grpc.StatusCode] = None,
        field: Optional[str] = None,
    ) -> None:
        self.code = code
        self.details = details
        self.field = field
        super().__init__(f"{field}: {details}" if field else details)


class InvalidArgument(StokeError, ValueError):
    """The request was malformed (gRPC ``INVALID_ARGUMENT``)."""


class InvalidSpec(InvalidArgument):
    """A job spec was rejected by the coordinator (or its file could not be read).

    Attributes:
        source: the job file it came from, when the problem is the file's own.
        problems: every problem the coordinator found (``stoke.v1.SpecProblem``: field,
            message, line, column), when it checked the job with ``ValidateJob``; the
            message then holds them all, a line each (``job.yaml:4:3: training.steps:
            must be at least 1``).
    """

    def __init__(
        self,
        details: str,
        *,
        code: Optional[grpc.StatusCode] = None,
        field: Optional[str] = None,
        source: Optional[str] = None,
    ) -> None:
        self.source = source
        self.problems: list = []
        super().__init__(details, code=code, field=field)
        if source:
            self.args = (f"{source}: {self.args[0]}",)


class NotFound(StokeError, LookupError):
    """No such job or checkpoint (gRPC ``NOT_FOUND``)."""


class AlreadyExists(StokeError):
    """gRPC ``ALREADY_EXISTS``."""


class FailedPrecondition(StokeError):
    """The job is not in a state that allows the call, e.g. no checkpoint to export yet."""


class Unavailable(StokeError, ConnectionError):
    """The coordinator cannot be reached (gRPC ``UNAVAILABLE``)."""


class DeadlineExceeded(StokeError, TimeoutError):
    """The call, or :meth:`stoke.Job.wait`, ran out of time."""


class Unauthenticated(StokeError, PermissionError):
    """The coordinator did not accept the credentials (gRPC ``UNAUTHENTICATED``)."""


class PermissionDenied(StokeError, PermissionError):
    """The caller's role does not allow the call (gRPC ``PERMISSION_DENIED``)."""


_BY_CODE: Dict[grpc.StatusCode, Type[StokeError]] = {
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgument,
    grpc.StatusCode.OUT_OF_RANGE: InvalidArgument,
    grpc.StatusCode.NOT_FOUND: NotFound,
    grpc.StatusCode.ALREADY_EXISTS: AlreadyExists,
    grpc.StatusCode.FAILED_PRECONDITION: FailedPrecondition,
    grpc.StatusCode.UNAVAILABLE: Unavailable,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceeded,
    grpc.StatusCode.UNAUTHENTICATED: Unauthenticated,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDenied,
}


def split_field(message: str) -> tuple:
    """Splits ``"spec.training.steps: must be > 0"`` into the field and the rest.

    Returns ``(None, message)`` when the message does not start with a field path.
    """
    match = _FIELD_PREFIX.match(message)
    if not match:
        return None, message
    return match.group(1), message[match.end():]


def error_from_rpc(error: grpc.RpcError, *, spec: bool = False) -> StokeError:
    """Converts a failed call into the matching :class:`StokeError`.

    Args:
        error: what grpcio raised (a ``grpc.Call`` as well as an ``RpcError``).
        spec: the call carried a job spec, so ``INVALID_ARGUMENT`` becomes
            :class:`InvalidSpec`.
    """
    code = error.code() if hasattr(error, "code") else grpc.StatusCode.UNKNOWN
    details = (error.details() if hasattr(error, "details") else None) or str(error)
    field = None
    if code in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.OUT_OF_RANGE):
        field, details = split_field(details)
    cls = _BY_CODE.get(code, StokeError)
    if spec and cls is InvalidArgument:
        cls = InvalidSpec
    return cls(details, code=code, field=field)
