#!/usr/bin/env bash
# On a GPU host, in one go, from a clean clone: build Stoke against the CUDA LibTorch there,
# run the GPU tests and the unit tests, then start a coordinator with one worker per GPU
# and train the example jobs on CUDA through the CLI. Exits non-zero, with a summary of
# what failed, when any of it fails. From the repository root:
#   scripts/gpu-check.sh
# Libraries: on a host with no package registry, carry the Debian packages of
# `scripts/fetch-debs.sh .gpu-deps` with the tree; they are unpacked and used from there
# (STOKE_GPU_DEPS names another folder). Otherwise the host's own packages are used.
# LibTorch: what scripts/find-libtorch.sh finds ($STOKE_LIBTORCH, python3's torch wheel,
# /opt/libtorch, ...); it must be a CUDA build.
# Data the host may lack travels in .gpu-data/ (git-ignored): fashion-mnist/ (from
# Debian's dataset-fashion-mnist) and GPL-3 (any text, for the language model).
# Logs land in $OUT (or ./gpu-out). STOKE_GPU_CHECK_INTEGRATION=1 adds the integration
# tests (they use CPU workers, as CI does).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
root=$PWD
out="${OUT:-$root/gpu-out}"
mkdir -p "$out"
build="build-gpu"

failed=()
passed=()
# check NAME COMMAND...: runs one step, records whether it passed.
check() {
  local name="$1"
  shift
  if "$@"; then
    passed+=("$name")
  else
    failed+=("$name")
    echo "FAILED: $name" >&2
  fi
}
summary() {
  echo
  echo "== gpu-check: ${#passed[@]} passed, ${#failed[@]} failed (logs in $out)"
  local name
  for name in "${passed[@]}"; do echo "  ok      $name"; done
  for name in "${failed[@]}"; do echo "  FAILED  $name"; done
  [ ${#failed[@]} -eq 0 ]
}
# Steps after a failed prerequisite cannot run; say so and stop.
give_up() {
  echo "gpu-check: $1" >&2
  failed+=("$1")
  summary
  exit 1
}

deps="${STOKE_GPU_DEPS:-.gpu-deps}"
if [ -f "$deps/setup.sh" ]; then
  # shellcheck source=/dev/null
  source "$deps/setup.sh" "$deps" > "$out/deps.log" 2>&1 || {
    cat "$out/deps.log" >&2
    give_up "unpack the carried packages in $deps"
  }
fi

{
  echo "date: $(date -u +%FT%TZ)"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
} > "$out/machine.txt" 2>&1 || give_up "nvidia-smi: no GPU visible ($(tail -n 1 "$out/machine.txt"))"
torch=$(scripts/find-libtorch.sh) || give_up "find a LibTorch (STOKE_LIBTORCH)"
echo "libtorch: $torch" >> "$out/machine.txt"
cat "$out/machine.txt"
[[ "$torch" == cuda\ * ]] ||
  give_up "find a CUDA LibTorch (found: $torch); set STOKE_LIBTORCH, or install the CUDA torch wheel for python3"

if [ -d .gpu-data/fashion-mnist ] && [ ! -d /usr/share/datasets/fashion-mnist ]; then
  mkdir -p /usr/share/datasets && cp -r .gpu-data/fashion-mnist /usr/share/datasets/
fi
[ -f .gpu-data/GPL-3 ] && export STOKE_TEXT_FILE="$root/.gpu-data/GPL-3"

# Build: configure, then every target (tests and benchmarks included).
mapfile -t torch_args < <(scripts/find-libtorch.sh --cmake-args)
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSTOKE_WERROR=OFF \
  "${torch_args[@]}" > "$out/build.log" 2>&1 || {
  tail -n 40 "$out/build.log" >&2
  give_up "configure (CMake; $out/build.log)"
}
grep 'Stoke: LibTorch' "$out/build.log"
ninja -C "$build" >> "$out/build.log" 2>&1 || {
  grep -E "error|Error" -A3 "$out/build.log" | head -n 60 >&2
  give_up "build (ninja; $out/build.log)"
}
echo "build ok, $(grep -c 'warning:' "$out/build.log") warnings"
passed+=("build")

# GPU tests first, run directly so their measurements print.
gpu_tests() {
  "$build/bin/gpu_tests" > "$out/gpu-tests.log" 2>&1
  local rc=$?
  grep -E "^\[  |on cuda" "$out/gpu-tests.log"
  return $rc
}
check "GPU tests (gpu_tests; $out/gpu-tests.log)" gpu_tests

# Parallel test processes each with all cores' worth of threads would thrash.
labels="unit"
[ "${STOKE_GPU_CHECK_INTEGRATION:-0}" = 1 ] && labels="unit|integration"
ctest_run() {
  (cd "$build" && OMP_NUM_THREADS=2 ctest -L "$labels" --output-on-failure -j 8 \
    > "$out/ctest.log" 2>&1)
  local rc=$?
  grep -E "tests passed|Failed|\*\*\*" "$out/ctest.log" | tail -n 8
  return $rc
}
check "$labels tests (ctest -L '$labels'; $out/ctest.log)" ctest_run

# End to end on CUDA, as a user would run it: a coordinator with one local worker per GPU.
bin="$root/$build/bin"
data=$(mktemp -d)
# The check leaves nothing running behind it: its workers stop with the coordinator.
"$bin/stoke-coordinator" --address 127.0.0.1:0 --data-dir "$data" --metrics-address "" \
  --stop-workers-on-exit \
  > "$out/e2e.log" 2>&1 &
coordinator=$!
trap 'kill -TERM $coordinator 2> /dev/null; wait $coordinator 2> /dev/null; rm -rf "$data"' EXIT
for _ in $(seq 1 120); do [ -f "$data/coordinator.address" ] && break; sleep 0.5; done
[ -f "$data/coordinator.address" ] || give_up "start the coordinator ($out/e2e.log)"
STOKE_ADDRESS=$(cat "$data/coordinator.address")
export STOKE_ADDRESS
gpus_attached() { "$bin/stoke" -o json cluster 2> /dev/null | grep -q DEVICE_TYPE_CUDA; }
for _ in $(seq 1 120); do gpus_attached && break; sleep 0.5; done
"$bin/stoke" cluster 2>&1 | tee -a "$out/e2e.log"
gpus_attached || give_up "attach one worker per GPU ($out/e2e.log, $data/logs)"

# train_example NAME: submits examples/NAME.yaml, watches it, and passes when it ended
# SUCCEEDED on a CUDA device.
train_example() {
  local example="$1" log="$out/e2e-$1.log" rc
  "$bin/stoke" submit "examples/$example.yaml" --watch > "$log" 2>&1
  rc=$?
  # The progress lines of the first 90% are noise here.
  grep -vE "step [0-9]+/[0-9]+ \((([1-9]|[1-8][0-9])%)" "$log" | tee -a "$out/e2e.log"
  [ $rc -eq 0 ] && grep -q 'SUCCEEDED' "$log" && grep -q 'cuda:' "$log"
}
check "example job mlp-synthetic on CUDA ($out/e2e-mlp-synthetic.log)" \
  train_example mlp-synthetic
if [ -d /usr/share/datasets/fashion-mnist ]; then
  check "example job fashion-mnist on CUDA ($out/e2e-fashion-mnist.log)" \
    train_example fashion-mnist
else
  echo "fashion-mnist: skipped (no /usr/share/datasets/fashion-mnist; carry it in .gpu-data/)"
fi
{
  "$bin/stoke" list
  "$bin/stoke" checkpoints 1
} 2>&1 | tee -a "$out/e2e.log"
kill -TERM $coordinator
wait $coordinator
trap 'rm -rf "$data"' EXIT
cat "$data"/logs/worker-*.log >> "$out/e2e.log" 2> /dev/null
summary
