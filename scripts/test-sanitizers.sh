#!/usr/bin/env bash
# The sanitizer and fuzzing pass CI runs after the test suite (.ci/run). Two build folders
# of Stoke's torch-free code (the coordinator, the CLI, their libraries and tests), made
# with Debian's clang:
#   build-asan  ASan + UBSan everywhere, and the libFuzzer targets (-DSTOKE_FUZZ=ON): runs
#               every unit test (label unit: the spec rules, the store, the core, the gRPC
#               API in process, the corpus of malformed requests), the stress test (label
#               stress), then each fuzz target for STOKE_FUZZ_SECONDS (default 20) from its
#               committed seed corpus (label fuzz).
#   build-tsan  TSan: the coordinator's concurrency tests that do not pass through gRPC
#               (the core under 500 workers' churn from many threads with submissions
#               and cancels, the core's flows, the event hub, the store). Debian's gRPC is
#               not built with TSan, so its completion queue's hand-offs between threads are
#               invisible to it: every message it passes reads as a race (in protobuf
#               and std::function code handed across libgrpc). The gRPC paths (the API
#               corpus, the 500 simulated workers over gRPC) run under ASan+UBSan instead.
# The worker (LibTorch) is left out (-DSTOKE_BUILD_WORKER=OFF): instrumenting LibTorch's
# headers in every worker file would double the suite's build on a 2-core CI machine, and
# Debian's libtorch is not instrumented anyway. Warnings are the main build's business
# (GCC, -Werror); here they are not errors, so a clang-only warning does not stop the pass
# before its tests run.
# Extra arguments go to every ctest run (e.g. -R Pattern).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup-deps.sh > /dev/null

jobs=$(nproc)
fuzz_seconds=${STOKE_FUZZ_SECONDS:-20}
common=(-G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++
  -DSTOKE_BUILD_WORKER=OFF -DSTOKE_WERROR=OFF)
tsan_targets=(server_unit_tests coordinator_stress_tests)

# Reports name the source line; a finding fails the test that made it.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:strict_string_checks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1}

step() {  # step NAME COMMAND...: runs it, and says how long it took
  local name=$1 start=$SECONDS
  shift
  echo "stoke: sanitizers: $name"
  "$@"
  echo "stoke: sanitizers: $name took $((SECONDS - start)) s"
}

build() {  # build DIR TARGETS... with the configure arguments in $flags
  local dir=$1
  shift
  if [ ! -f "$dir/build.ninja" ]; then
    cmake -S . -B "$dir" "${common[@]}" "${flags[@]}" > /dev/null
  fi
  if ! ninja -C "$dir" -j "$jobs" "$@" > "$dir/last-build.log" 2>&1; then
    grep -v '^\[' "$dir/last-build.log" >&2
    echo "stoke: sanitizers: build in $dir failed (log: $dir/last-build.log)" >&2
    return 1
  fi
}

total=$SECONDS
flags=(-DSTOKE_FUZZ=ON "-DSTOKE_FUZZ_SECONDS=$fuzz_seconds")
step "ASan+UBSan build" build build-asan  # everything: the tests, fuzz targets and programs
step "ASan+UBSan tests" ctest --test-dir build-asan --output-on-failure -j "$jobs" -L 'unit|stress' \
  -LE fuzz "$@"
step "fuzzing, ${fuzz_seconds} s a target" ctest --test-dir build-asan --output-on-failure \
  -j "$jobs" -L fuzz "$@"

flags=(-DCMAKE_CXX_FLAGS=-fsanitize=thread -DCMAKE_EXE_LINKER_FLAGS=-fsanitize=thread
  -DCMAKE_SHARED_LINKER_FLAGS=-fsanitize=thread)
step "TSan build" build build-tsan "${tsan_targets[@]}"
step "TSan tests" ctest --test-dir build-tsan --output-on-failure -j "$jobs" \
  -R '^(Stress\.TheCore|CoordinatorTest\.|EventHub|SqliteJobStore)' "$@"
echo "stoke: sanitizers: all passed in $((SECONDS - total)) s"
