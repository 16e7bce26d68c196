#!/usr/bin/env bash
# The whole test suite: builds (installing what is missing), then runs every CTest test.
# Tests labelled gpu skip themselves on machines without CUDA.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/build.sh
cd build
ctest --output-on-failure --timeout 600 -j "$(nproc)" "$@"
