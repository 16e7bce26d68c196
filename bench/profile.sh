#!/usr/bin/env bash
# Where the device time of one training step goes, Stoke against PyTorch Python, per model:
# Kineto traces of a few steps after warm-up (stoke-bench --trace with the step eager, so
# each kernel shows; train_reference.py --trace eager and under torch.compile), summarised
# by bench/python/trace_summary.py into $OUT/profile-<model>.md (traces beside it, gzipped).
# From the repo root on the GPU machine:
#   source .gpu-deps/setup-device.sh && bench/profile.sh
# Environment: MODELS (default "gpt2-small"; also resnet50, mlp-256, mlp-1024),
# PY_MODES (default "eager compile"; "none": Stoke alone), STEPS (traced steps, default 5), STOKE_SETS (extra
# --set arguments for Stoke, e.g. "training.cuda_graph=on"), STOKE_BENCH, PYTHON.
set -uo pipefail
out="${OUT:-$PWD/bench-out}"
mkdir -p "$out"
here="$(cd "$(dirname "$0")" && pwd)"
python="${PYTHON:-python3}"
steps="${STEPS:-5}"
bench="${STOKE_BENCH:-build-gpu/bin/stoke-bench}"
if [ ! -x "$bench" ]; then
  cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DSTOKE_WERROR=OFF \
    > "$out/profile-build.log" 2>&1 && ninja -C build-gpu stoke-bench >> "$out/profile-build.log" 2>&1 ||
    { tail -40 "$out/profile-build.log"; exit 1; }
fi
timing=(--warmup-steps 20 --windows 2 --window-steps 10)
py_timing=(--warmup 20 --windows 2 --window-steps 10)
extra=()
for s in ${STOKE_SETS:-}; do extra+=(--set "$s"); done

for model in ${MODELS:-gpt2-small}; do
  case $model in
    gpt2-small) spec=bench/specs/gpt2-small.yaml sets=() py=(--model gpt2-small) ;;
    resnet50) spec=bench/specs/resnet50.yaml sets=() py=(--model resnet50) ;;
    mlp-*)
      d=${model#mlp-} spec=bench/specs/mlp.yaml py=(--model mlp --d "$d")
      sets=(--set "data.synthetic.features=$d" --set "model.mlp.hidden=[$((4 * d)),$d]") ;;
    *) echo "unknown model $model" >&2; continue ;;
  esac
  traces=()
  echo "[$(date +%T)] $model: stoke (eager step)" >&2
  "$bench" "$spec" "${sets[@]}" --set training.cuda_graph=off ${extra[@]+"${extra[@]}"} \
    "${timing[@]}" --trace "$out/trace-$model-stoke.json" --trace-steps "$steps" \
    > "$out/profile-$model-stoke.log" 2>&1
  tail -1 "$out/profile-$model-stoke.log" >&2
  [ -s "$out/trace-$model-stoke.json" ] && traces+=("stoke=$out/trace-$model-stoke.json")
  py_modes="${PY_MODES:-eager compile}"
  [ "$py_modes" = none ] && py_modes=""
  for mode in $py_modes; do
    echo "[$(date +%T)] $model: python $mode" >&2
    "$python" "$here/python/train_reference.py" "${py[@]}" --mode "$mode" "${py_timing[@]}" \
      --trace "$out/trace-$model-python-$mode.json" --trace-steps "$steps" \
      > "$out/profile-$model-python-$mode.log" 2>&1
    tail -1 "$out/profile-$model-python-$mode.log" >&2
    [ -s "$out/trace-$model-python-$mode.json" ] &&
      traces+=("python-$mode=$out/trace-$model-python-$mode.json")
  done
  [ ${#traces[@]} -gt 0 ] &&
    "$python" "$here/python/trace_summary.py" --steps "$steps" "${traces[@]}" \
      > "$out/profile-$model.md" 2>&1
  cat "$out/profile-$model.md"
  gzip -f "$out"/trace-"$model"-*.json
done
