"""Builds the `stoke` package; metadata lives in pyproject.toml.

The work here: the message and stub modules (``stoke.v1``) are generated from the
repository's ``proto/`` (two folders up) straight into the build's own folder, and the
build and its metadata go to a temporary folder: building or installing writes nothing
into the source tree. A source tree without ``proto/`` (an sdist) must already hold the
generated modules in ``stoke/v1``; they are copied from there.
"""

import atexit
import shutil
import sys
import tempfile
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
PROTO_DIR = HERE.parent.parent / "proto"

sys.path.insert(0, str(HERE))
import generate_stubs  # noqa: E402  (next to this file)


class BuildWithStubs(build_py):
    """build_py, then the generated modules into the build folder (not the source's)."""

    def run(self):
        super().run()
        target = Path(self.build_lib)
        if (PROTO_DIR / "stoke" / "v1" / "coordinator.proto").exists():
            generate_stubs.generate(PROTO_DIR, target, generate_stubs.find_compiler())
        elif (HERE / "stoke" / "v1" / "coordinator_pb2.py").exists():
            shutil.copytree(HERE / "stoke" / "v1", target / "stoke" / "v1", dirs_exist_ok=True,
                            ignore=shutil.ignore_patterns("__pycache__"))
        else:
            raise SystemExit(f"stoke: found neither {PROTO_DIR} nor generated stubs in stoke/v1")


# setuptools' own scratch folders (build/, stoke.egg-info/) would land beside this file.
scratch = Path(tempfile.mkdtemp(prefix="stoke-sdk-build-"))
atexit.register(shutil.rmtree, scratch, ignore_errors=True)

setup(
    cmdclass={"build_py": BuildWithStubs},
    options={"build": {"build_base": str(scratch / "build")},
             "egg_info": {"egg_base": str(scratch)}},
)
