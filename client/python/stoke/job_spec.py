"""Job specs the SDK takes, read by the coordinator with the one job-file grammar.

A job is a ``stoke.v1.JobSpec`` message, a dict in the job-file format, or the path of a
YAML or JSON job file, as ``stoke submit`` takes. The SDK keeps no grammar of its own:
a dict is sent as JSON and a file as its text to the coordinator's ``ValidateJob``, which
reads it exactly as the CLI does (the grammar lives in the coordinator's ``spec/``
library) and answers every problem at once, each with its line and column. A file's
relative data and model paths are resolved against the file's own folder.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any, List, Mapping, Union

import grpc

from stoke.errors import InvalidSpec
from stoke.v1 import coordinator_pb2, job_spec_pb2

__all__ = ["SpecLike", "validate_request", "problems_error"]

SpecLike = Union[job_spec_pb2.JobSpec, Mapping[str, Any], str, "os.PathLike[str]"]

# What a dict's text is called in the coordinator's answer.
DICT_SOURCE = "<dict>"

# As the CLI: a job file is a few hundred bytes; this leaves room for long comments while
# keeping a `/dev/zero`-like mistake harmless.
MAX_JOB_FILE_BYTES = 1 << 20


def _read_job_file(path: Path) -> str:
    """The file's text; refuses anything but a regular file of at most 1 MiB."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)  # a FIFO must not block
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise InvalidSpec("not a regular file; a job file is a YAML or JSON file", source=str(path))
        data = handle.read(MAX_JOB_FILE_BYTES + 1)
    if len(data) > MAX_JOB_FILE_BYTES:
        raise InvalidSpec(f"a job file may hold at most {MAX_JOB_FILE_BYTES} bytes", source=str(path))
    return data.decode("utf-8", errors="replace")


def validate_request(spec: SpecLike) -> coordinator_pb2.ValidateJobRequest:
    """The ``ValidateJob`` request for what :meth:`stoke.Client.submit` accepts.

    Raises:
        FileNotFoundError: the job file does not exist.
        InvalidSpec: it is no regular file, or too large.
        TypeError: ``spec`` is none of the accepted kinds.
    """
    if isinstance(spec, job_spec_pb2.JobSpec):
        return coordinator_pb2.ValidateJobRequest(spec=spec)
    if isinstance(spec, Mapping):
        # NaN and infinities are written as YAML reads them, for the coordinator to refuse
        # by name (optimizer.lr: expected a number, got "NaN").
        try:
            text = json.dumps(spec)
        except (TypeError, ValueError) as error:
            raise InvalidSpec(f"not plain data a job file could hold: {error}") from error
        return coordinator_pb2.ValidateJobRequest(job_file=text, job_file_name=DICT_SOURCE)
    if isinstance(spec, (str, os.PathLike)):
        path = Path(spec)
        return coordinator_pb2.ValidateJobRequest(
            job_file=_read_job_file(path),
            job_file_name=str(path),
            base_dir=str(path.absolute().parent),
        )
    raise TypeError(
        f"a job spec is a stoke.v1.JobSpec, a dict or a job file's path, not {type(spec).__name__}"
    )


def describe_problem(source: str, problem: coordinator_pb2.SpecProblem) -> str:
    """``job.yaml:4:3: training.steps: must be at least 1``, as the CLI prints it; a dict's
    problems name the field alone (a place in its JSON would mean nothing to its author)."""
    field = f"{problem.field}: " if problem.field else ""
    if source == DICT_SOURCE:
        return f"{field}{problem.message}"
    where = source or "job"
    if problem.line:
        where += f":{problem.line}" + (f":{problem.column}" if problem.column else "")
    return f"{where}: {field}{problem.message}"


def problems_error(
    request: coordinator_pb2.ValidateJobRequest, problems: List[coordinator_pb2.SpecProblem]
) -> InvalidSpec:
    """One :class:`InvalidSpec` for every problem the coordinator found: its message a line
    per problem, ``problems`` the list, ``field`` and ``details`` the first problem's."""
    lines = [describe_problem(request.job_file_name, p) for p in problems]
    first = problems[0]
    error = InvalidSpec(
        first.message, code=grpc.StatusCode.INVALID_ARGUMENT, field=first.field or None
    )
    error.problems = list(problems)
    error.args = ("\n".join(lines),)
    return error
