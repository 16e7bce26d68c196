#!/usr/bin/env bash
# On the GPU machine, in one go: build Stoke against the torch wheel, run the unit and
# GPU tests, then start a coordinator with one worker per GPU and train the example job
# on CUDA through the CLI. Logs land in $OUT (or ./gpu-out). Usage, from the repo root:
#   source .gpu-deps/setup-device.sh && scripts/gpu-check.sh
set -uo pipefail
out="${OUT:-$PWD/gpu-out}"
mkdir -p "$out"
{
  echo "date: $(date -u +%FT%TZ)"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
} | tee "$out/machine.txt"

set -e
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DSTOKE_WERROR=OFF \
  > "$out/cmake.log" 2>&1 || { tail -40 "$out/cmake.log"; exit 1; }
ninja -C build-gpu > "$out/build.log" 2>&1 || { grep -E "error|Error" -A3 "$out/build.log" | head -60; exit 1; }
echo "build ok: $(ls build-gpu/bin | tr '\n' ' ')"
set +e

(cd build-gpu && ctest -L "unit|gpu" --output-on-failure -j 8 > "$out/ctest-unit-gpu.log" 2>&1)
echo "unit+gpu tests: rc=$?"; grep -E "tests passed|Failed|Skipped" "$out/ctest-unit-gpu.log" | tail -8
(cd build-gpu && ctest -L integration --output-on-failure -j 4 > "$out/ctest-integration.log" 2>&1)
echo "integration tests: rc=$?"; grep -E "tests passed|Failed" "$out/ctest-integration.log" | tail -8

# End to end on CUDA, as a user would run it.
data=$(mktemp -d)
build-gpu/bin/stoke-worker --list-devices | tee "$out/devices.txt"
build-gpu/bin/stoke-coordinator --address 127.0.0.1:0 --data-dir "$data" > "$out/coordinator.log" 2>&1 &
coord=$!
for _ in $(seq 1 120); do [ -f "$data/coordinator.address" ] && break; sleep 0.5; done
export STOKE_ADDRESS=$(cat "$data/coordinator.address")
for _ in $(seq 1 120); do build-gpu/bin/stoke cluster -o json 2>/dev/null | grep -q '"id"' && break; sleep 0.5; done
build-gpu/bin/stoke cluster | tee "$out/cluster.txt"
build-gpu/bin/stoke submit examples/mlp-synthetic.yaml --watch | tee "$out/watch.txt"
echo "example job exit: ${PIPESTATUS[0]}"
build-gpu/bin/stoke status 1 | tee -a "$out/watch.txt"
kill -TERM $coord; wait $coord
cp "$data"/logs/worker-0.log "$out/" 2>/dev/null
exit 0
