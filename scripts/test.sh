#!/usr/bin/env bash
# The whole test suite: builds (installing what is missing), then runs every CTest test.
# Tests labelled gpu skip themselves on machines without CUDA. The container test (label
# container) builds an image for many minutes: it runs only when asked for, with
# `cd build && ctest -L container`.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/build.sh
cd build
ctest --output-on-failure --timeout 600 -j "$(nproc)" -LE container "$@"
