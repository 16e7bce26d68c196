#!/usr/bin/env bash
# On the GPU machine, in one go: build Stoke against the torch wheel, run the unit and GPU
# tests, then start a coordinator with one worker per GPU and train the examples on CUDA
# through the CLI. Logs land in $OUT (or ./gpu-out). From the repo root:
#   source .gpu-deps/setup-device.sh && scripts/gpu-check.sh
# Data the GPU machine lacks travels in .gpu-data/ (git-ignored): fashion-mnist/ (from
# Debian's dataset-fashion-mnist) and GPL-3 (any text, for the language model).
set -uo pipefail
out="${OUT:-$PWD/gpu-out}"
mkdir -p "$out"
{
  echo "date: $(date -u +%FT%TZ)"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
} | tee "$out/machine.txt"
if [ -d .gpu-data/fashion-mnist ] && [ ! -d /usr/share/datasets/fashion-mnist ]; then
  mkdir -p /usr/share/datasets && cp -r .gpu-data/fashion-mnist /usr/share/datasets/
fi
[ -f .gpu-data/GPL-3 ] && export STOKE_TEXT_FILE="$PWD/.gpu-data/GPL-3"

set -e
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DSTOKE_WERROR=OFF \
  > "$out/build.log" 2>&1 || { tail -40 "$out/build.log"; exit 1; }
ninja -C build-gpu >> "$out/build.log" 2>&1 || { grep -E "error|Error" -A3 "$out/build.log" | head -60; exit 1; }
echo "build ok, $(grep -c 'warning:' "$out/build.log") warnings"
set +e

# GPU tests first, run directly so their measurements print.
build-gpu/bin/gpu_tests 2>&1 | tee "$out/gpu-tests.log" | grep -E "^\[  |on cuda" 
# Integration tests use CPU workers, as CI does; STOKE_GPU_CHECK_INTEGRATION=1 adds them.
labels="unit"
[ "${STOKE_GPU_CHECK_INTEGRATION:-0}" = 1 ] && labels="unit|integration"
# Parallel test processes each with all cores' worth of threads would thrash.
(cd build-gpu && OMP_NUM_THREADS=2 ctest -L "$labels" --output-on-failure -j 8 > "$out/ctest.log" 2>&1)
echo "$labels tests: rc=$?"; grep -E "tests passed|Failed|\*\*\*" "$out/ctest.log" | tail -8

# End to end on CUDA, as a user would run it.
data=$(mktemp -d)
bin=build-gpu/bin
$bin/stoke-coordinator --address 127.0.0.1:0 --data-dir "$data" > "$out/e2e.log" 2>&1 &
coord=$!
for _ in $(seq 1 120); do [ -f "$data/coordinator.address" ] && break; sleep 0.5; done
export STOKE_ADDRESS=$(cat "$data/coordinator.address")
for _ in $(seq 1 120); do $bin/stoke cluster -o json 2>/dev/null | grep -q '"id"' && break; sleep 0.5; done
{
  $bin/stoke cluster
  for example in mlp-synthetic fashion-mnist; do
    $bin/stoke submit examples/$example.yaml --watch | grep -vE "step [0-9]+/[0-9]+ \((([1-9]|[1-8][0-9])%)"
    echo "$example exit: ${PIPESTATUS[0]}"
  done
  $bin/stoke list
  $bin/stoke checkpoints 2
} 2>&1 | tee -a "$out/e2e.log"
kill -TERM $coord; wait $coord
cat "$data"/logs/worker-0.log >> "$out/e2e.log" 2>/dev/null
exit 0
