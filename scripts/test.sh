#!/usr/bin/env bash
# The whole test suite: builds (installing what is missing), then runs every CTest test.
# Tests labelled gpu skip themselves on machines without CUDA. Left out: the container
# test (label container; it builds an image for many minutes) and the Slurm test (label
# slurm; it starts Slurm's daemons as root): `cd build && ctest -L 'container|slurm'`.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/build.sh
cd build
ctest --output-on-failure --timeout 600 -j "$(nproc)" -LE 'container|slurm' "$@"
