"""A Python model's code, read as ``stoke submit`` reads it: ``model.python.file`` names a
``.py`` file or a package folder, whose files (all but hidden entries, ``__pycache__``
folders and ``.pyc`` files) travel with the job, at most 8 MiB in 1,000 files. The
coordinator checks them again; this module only reads.
"""

import os
import stat
from pathlib import Path
from typing import Union

from stoke.errors import InvalidSpec
from stoke.v1 import job_spec_pb2

MAX_CODE_BYTES = 8 << 20
MAX_CODE_FILES = 1000
FIELD = "model.python.file"


def _too_large(what: str, field: str) -> InvalidSpec:
    return InvalidSpec(
        f"{what}; the code of a job may take at most {MAX_CODE_BYTES >> 20} MiB in "
        f"{MAX_CODE_FILES} files: keep data, weights and checkpoints on a data root and read "
        "them from there",
        field=field,
    )


def _skipped(name: str) -> bool:
    return name.startswith(".") or name == "__pycache__" or name.endswith(".pyc")


def read_code(path: Union[str, "os.PathLike[str]"], field: str = FIELD) -> job_spec_pb2.CodeBundle:
    """The bundle of a ``.py`` file or a package folder, paths starting with its own name.

    Raises:
        InvalidSpec: naming ``field`` (``model.python.file``, or ``command.workdir`` for a
            script job's folder): no such file, not code, a link or
            another special file inside a folder, or over the limits.
    """
    if not os.fspath(path):
        raise InvalidSpec("required: a .py file or a folder holding a package", field=field)
    root = Path(path)
    bundle = job_spec_pb2.CodeBundle()
    total = 0

    def add(file: Path, name: str) -> None:
        nonlocal total
        if len(bundle.files) >= MAX_CODE_FILES:
            raise _too_large(f"{file}: more than {MAX_CODE_FILES} files", field)
        mode = os.lstat(file).st_mode if file != root else os.stat(file).st_mode
        if not stat.S_ISREG(mode):
            raise InvalidSpec(f"{file}: not a regular file", field=field)
        content = file.read_bytes()
        total += len(content)
        if total > MAX_CODE_BYTES:
            raise _too_large(f"{file}: more than {MAX_CODE_BYTES >> 20} MiB of files", field)
        bundle.files.add(path=name, content=content)

    def walk(folder: Path, name: str) -> None:
        for entry in sorted(os.listdir(folder)):
            if _skipped(entry):
                continue
            full = folder / entry
            mode = os.lstat(full).st_mode
            if stat.S_ISDIR(mode):
                walk(full, f"{name}/{entry}")
            elif stat.S_ISREG(mode):
                add(full, f"{name}/{entry}")
            else:
                link = ": a symbolic link" if stat.S_ISLNK(mode) else ""
                raise InvalidSpec(f"{full}{link}: code must be plain files and folders",
                                  field=field)

    try:
        if field != FIELD and not root.is_dir():
            raise InvalidSpec(f"{root}: expected a folder", field=field)
        if root.is_dir():
            walk(root, root.resolve().name)
            if not bundle.files:
                raise InvalidSpec(f"{root}: an empty folder", field=field)
        elif root.is_file():
            if root.suffix != ".py":
                raise InvalidSpec(f"{root}: expected a .py file or a package folder",
                                  field=field)
            add(root, root.name)
        else:
            raise InvalidSpec(f"{root}: no such file or folder", field=field)
    except OSError as error:
        raise InvalidSpec(f"{error.filename or root}: cannot read: {error.strerror}",
                          field=field) from error
    return bundle
