#!/usr/bin/env bash
# Where the device time of one training step goes, Stoke against PyTorch Python, per model:
# Kineto traces of a few steps after warm-up (stoke-bench --trace with the step eager, so
# each kernel shows; train_reference.py --trace eager and under torch.compile), summarised
# by bench/python/trace_summary.py into $OUT/profile-<model>.md (traces beside it, gzipped).
# From the repo root on the GPU machine:
#   source .gpu-deps/setup.sh && bench/profile.sh
# Environment: MODELS (default "gpt2-small"; any case of bench/speed.sh: mlp-D, resnet50,
# fmnist-cnn with FMNIST_DIR), PY_MODES (default "eager compile"; "none": Stoke alone),
# STEPS (traced steps, default 5), STOKE_SETS (extra --set arguments for Stoke, e.g.
# "training.cuda_graph=on"), STOKE_BENCH, PYTHON. TOP: kernels listed (default 40).
set -uo pipefail
out="${OUT:-$PWD/bench-out}"
mkdir -p "$out"
here="$(cd "$(dirname "$0")" && pwd)"
python="${PYTHON:-python3}"
steps="${STEPS:-5}"
source "$here/cases.sh"
ensure_stoke_bench
timing=(--warmup-steps 20 --windows 2 --window-steps 10)
py_timing=(--warmup 20 --windows 2 --window-steps 10)
extra=()
for s in ${STOKE_SETS:-}; do extra+=(--set "$s"); done

for model in ${MODELS:-gpt2-small}; do
  if ! setup_case "$model"; then
    echo "cannot profile $model: unknown, or fmnist-cnn without FMNIST_DIR" >&2
    continue
  fi
  traces=()
  echo "[$(date +%T)] $model: stoke (eager step)" >&2
  "$bench" "$spec" ${sets[@]+"${sets[@]}"} --set training.cuda_graph=off ${extra[@]+"${extra[@]}"} \
    "${timing[@]}" --trace "$out/trace-$model-stoke.json" --trace-steps "$steps" \
    > "$out/profile-$model-stoke.log" 2>&1
  tail -1 "$out/profile-$model-stoke.log" >&2
  [ -s "$out/trace-$model-stoke.json" ] && traces+=("stoke=$out/trace-$model-stoke.json")
  py_modes="${PY_MODES:-eager compile}"
  [ "$py_modes" = none ] && py_modes=""
  for mode in $py_modes; do
    echo "[$(date +%T)] $model: python $mode" >&2
    "$python" "$here/python/train_reference.py" "${py_args[@]}" --mode "$mode" "${py_timing[@]}" \
      --trace "$out/trace-$model-python-$mode.json" --trace-steps "$steps" \
      > "$out/profile-$model-python-$mode.log" 2>&1
    tail -1 "$out/profile-$model-python-$mode.log" >&2
    [ -s "$out/trace-$model-python-$mode.json" ] &&
      traces+=("python-$mode=$out/trace-$model-python-$mode.json")
  done
  [ ${#traces[@]} -gt 0 ] &&
    "$python" "$here/python/trace_summary.py" --steps "$steps" --top "${TOP:-40}" "${traces[@]}" \
      > "$out/profile-$model.md" 2>&1
  cat "$out/profile-$model.md"
  gzip -f "$out"/trace-"$model"-*.json
done
