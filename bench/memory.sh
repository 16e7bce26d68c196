#!/usr/bin/env bash
# Where a model's peak device memory comes from: Stoke's peak with its defaults and with
# one setting changed at a time (the step eager, ATen's kernels only, ...), beside
# PyTorch's peak in one mode, one short run each. Stoke's log line at the step's capture
# says what was in use then and the peak so far, i.e. whether warm-up and capture set the
# peak or the replays did. Writes $OUT/memory.md. From the repo root on the GPU machine:
#   source .gpu-deps/setup.sh && MODELS=mlp-4096 bench/memory.sh
# Environment: MODELS (cases of bench/cases.sh, default "mlp-4096"), VARIANTS (Stoke
# settings, space-separated; "default" for none, commas join several settings in one
# variant; default "default training.cuda_graph=off training.fused_kernels=off"),
# PY_MODE (default compile-cuda-graph; "none" skips Python), STOKE_BENCH, PYTHON.
# MEMORY_HISTORY=1 also records every allocation of each run and lists, per model, the
# blocks alive at each run's peak (bench/python/memory_peak.py) in
# $OUT/memory-peak-<model>.md; the snapshots stay beside it.
set -uo pipefail
out="${OUT:-$PWD/bench-out}"
mkdir -p "$out"
here="$(cd "$(dirname "$0")" && pwd)"
python="${PYTHON:-python3}"
source "$here/cases.sh"
ensure_stoke_bench
variants="${VARIANTS:-default training.cuda_graph=off training.fused_kernels=off}"
py_mode="${PY_MODE:-compile-cuda-graph}"
report="$out/memory.md"

gib() {  # log -> the peak of its last JSON line, in GiB
  "$python" -c '
import json, sys
rows = [l for l in open(sys.argv[1], errors="replace") if l.startswith("{")]
row = json.loads(rows[-1]) if rows else {}
peak = row.get("peak_memory_bytes")
print("%.2f GiB" % (peak / 2**30) if peak else "no result: " + str(row.get("error", "see log")))
' "$1"
}

echo "| model | run | peak | at capture |" > "$report"
echo "|---|---|---|---|" >> "$report"
for model in ${MODELS:-mlp-4096}; do
  if ! setup_case "$model"; then
    echo "| $model | cannot run: unknown, or fmnist-cnn without FMNIST_DIR | | |" >> "$report"
    continue
  fi
  snapshots=()
  for variant in $variants; do
    extra=()
    if [ "$variant" != default ]; then
      IFS=, read -ra settings <<< "$variant"
      for s in "${settings[@]}"; do extra+=(--set "$s"); done
    fi
    name="$model-stoke-${variant//[^A-Za-z0-9_.=-]/_}"
    log="$out/memory-$name.log"
    if [ "${MEMORY_HISTORY:-0}" = 1 ]; then
      extra+=(--memory-history "$out/snapshot-$name.pickle")
      snapshots+=("stoke-$variant=$out/snapshot-$name.pickle")
    fi
    echo "[$(date +%T)] $model: stoke $variant" >&2
    timeout -k 10 300 "$bench" "$spec" ${sets[@]+"${sets[@]}"} ${extra[@]+"${extra[@]}"} \
      --warmup-steps 20 --windows 2 --window-steps 10 > "$log" 2>&1
    capture=$(grep -o 'device memory [0-9.]* GiB in use, peak [0-9.]* GiB so far' "$log" |
                tail -1)
    echo "| $model | stoke $variant | $(gib "$log") | ${capture:-not captured} |" >> "$report"
  done
  if [ "$py_mode" != none ]; then
    log="$out/memory-$model-python-$py_mode.log"
    py_extra=()
    if [ "${MEMORY_HISTORY:-0}" = 1 ]; then
      py_extra=(--memory-history "$out/snapshot-$model-python-$py_mode.pickle")
      snapshots+=("python-$py_mode=$out/snapshot-$model-python-$py_mode.pickle")
    fi
    echo "[$(date +%T)] $model: python $py_mode" >&2
    timeout -k 10 300 "$python" "$here/python/train_reference.py" "${py_args[@]}" \
      --mode "$py_mode" --batch "$batch" --warmup 20 --windows 2 --window-steps 10 \
      ${py_extra[@]+"${py_extra[@]}"} > "$log" 2>&1
    echo "| $model | python $py_mode | $(gib "$log") | |" >> "$report"
  fi
  if [ ${#snapshots[@]} -gt 0 ]; then
    "$python" "$here/python/memory_peak.py" "${snapshots[@]}" > "$out/memory-peak-$model.md" 2>&1
  fi
done
cat "$report"
