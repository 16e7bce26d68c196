#!/usr/bin/env python3
"""Generates the Python messages and gRPC stubs of Stoke's public API from ``proto/``.

Used by the CMake build (which passes the protoc and plugin it found) and by
``setup.py`` when pip builds the package. The modules land in ``<out>/stoke/v1/``, so
that the generated ``from stoke.v1 import job_pb2`` imports resolve inside the ``stoke``
package itself; they are build outputs, never committed.

Which compiler: ``protoc`` with gRPC's ``grpc_python_plugin`` (Debian's
protobuf-compiler and protobuf-compiler-grpc) when both are found, else
``python -m grpc_tools.protoc`` (the grpcio-tools wheel). Debian 12's python3-grpc-tools
bundles protoc 3.5, which predates proto3 ``optional`` fields, so it is used only when
it is recent enough.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import List, Optional, Sequence

# The public API only: worker_link.proto is the coordinator's private protocol.
PUBLIC_PROTOS = ("stoke/v1/job_spec.proto", "stoke/v1/job.proto", "stoke/v1/coordinator.proto")

# proto3 `optional` became generally available in protoc 3.15.
_MIN_PROTOC = (3, 15)

_PACKAGE_INIT = '''"""Messages and gRPC stubs generated from Stoke's proto/stoke/v1 at build time."""
'''


def _version_of(command: Sequence[str]) -> Optional[tuple]:
    try:
        out = subprocess.run(
            [*command, "--version"], capture_output=True, text=True, check=False
        ).stdout
    except OSError:
        return None
    match = re.search(r"(\d+)\.(\d+)", out)
    return (int(match.group(1)), int(match.group(2))) if match else None


def find_compiler(protoc: Optional[str] = None, plugin: Optional[str] = None) -> List[str]:
    """Returns the command line prefix that compiles protos to Python with gRPC stubs."""
    protoc = protoc or shutil.which("protoc")
    plugin = plugin or shutil.which("grpc_python_plugin")
    if protoc and plugin and (_version_of([protoc]) or (0, 0)) >= _MIN_PROTOC:
        return [protoc, f"--plugin=protoc-gen-grpc_python={plugin}"]
    grpc_tools = [sys.executable, "-m", "grpc_tools.protoc"]
    if (_version_of(grpc_tools) or (0, 0)) >= _MIN_PROTOC:
        return grpc_tools
    raise RuntimeError(
        "cannot generate Stoke's Python stubs: need protoc >= 3.15 with grpc_python_plugin "
        "(Debian: protobuf-compiler protobuf-compiler-grpc) or the grpcio-tools package"
    )


def generate(proto_dir: Path, out_dir: Path, compiler: Sequence[str]) -> List[Path]:
    """Compiles the public protos into ``out_dir/stoke/v1``; returns the files written."""
    proto_dir = Path(proto_dir).resolve()
    out_dir = Path(out_dir).resolve()
    target = out_dir / "stoke" / "v1"
    target.mkdir(parents=True, exist_ok=True)
    sources = [str(proto_dir / p) for p in PUBLIC_PROTOS]
    command = [
        *compiler,
        f"--proto_path={proto_dir}",
        f"--python_out={out_dir}",
        f"--pyi_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        *sources,
    ]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{result.stderr}")
    (target / "__init__.py").write_text(_PACKAGE_INIT)
    return sorted(target.iterdir())


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--proto-dir", type=Path, required=True, help="the repository's proto/")
    parser.add_argument("--out", type=Path, required=True, help="folder that holds stoke/")
    parser.add_argument("--protoc", help="protoc to use (default: found on PATH)")
    parser.add_argument("--grpc-plugin", help="grpc_python_plugin to use")
    args = parser.parse_args(argv)
    try:
        generate(args.proto_dir, args.out, find_compiler(args.protoc, args.grpc_plugin))
    except RuntimeError as error:
        print(f"generate_stubs: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
