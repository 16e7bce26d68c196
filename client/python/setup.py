"""Builds the `stoke` package; metadata lives in pyproject.toml.

The only work here: generate the message and stub modules from the repository's
``proto/`` (two folders up) before setuptools looks at the package, since they are build
outputs and not in git. A source tree without ``proto/`` (an sdist) must already hold them.
"""

import sys
from pathlib import Path

from setuptools import setup

HERE = Path(__file__).resolve().parent
PROTO_DIR = HERE.parent.parent / "proto"

sys.path.insert(0, str(HERE))
import generate_stubs  # noqa: E402  (next to this file)

if (PROTO_DIR / "stoke" / "v1" / "coordinator.proto").exists():
    generate_stubs.generate(PROTO_DIR, HERE, generate_stubs.find_compiler())
elif not (HERE / "stoke" / "v1" / "coordinator_pb2.py").exists():
    raise SystemExit(f"stoke: found neither {PROTO_DIR} nor generated stubs in stoke/v1")

setup()
