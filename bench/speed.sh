#!/usr/bin/env bash
# Single-GPU speed: Stoke's C++ engine against the best PyTorch a strong engineer would write
# in Python, same model, batch, hyper-parameters and data. Per case, stoke-bench trains the
# spec in bench/specs/ and bench/python/train_reference.py trains the same network
# (bench/python/models.py) in every mode: eager; torch.compile in its default,
# reduce-overhead and max-autotune-no-cudagraphs modes; and the whole step (forward,
# backward, AdamW) captured by hand as one CUDA graph, of the eager model (cuda-graph), the
# compiled one (compile-cuda-graph) and the max-autotuned one
# (compile-max-autotune-cuda-graph). Each run warms up 30 steps (rounded up to whole
# windows: 40), then times 6 windows of 20 steps between CUDA events and reports the
# median window; each figure is the median of RUNS runs (default 3), taken in turns, with
# their spread. Then an ablation on one model: what each of Stoke's settings adds, from an
# fp32 eager baseline on ATen's operations to Stoke's own CUDA kernels last
# (`training.fused_kernels`). Prints Markdown tables (bench/python/speed_table.py; also
# $OUT/speed.md; raw JSON lines, one per run, in $OUT/speed.jsonl, each run's log beside
# them). From the repo root on the GPU machine:
#   source .gpu-deps/setup.sh && bench/speed.sh
# Environment: MODELS (default "mlp-256 mlp-1024 mlp-4096 gpt2-small resnet50
# resnet34-cifar fmnist-cnn"; "mlp" is the three MLPs), FMNIST_DIR (Fashion-MNIST's idx
# files; without it fmnist-cnn is skipped), RUNS (default 3), SKIP_PYTHON=1 (Stoke only),
# PY_MODES (default: the seven above; also compile-max-autotune, max-autotune with
# cudagraph trees), PY_ONCE_MODES (modes run once per model, in the first round only: a
# sweep of the slower-to-compile modes beside the best mode's repeated runs), JOB_TIMEOUT
# (seconds per run, default 300), ABLATION_MODEL (default mlp-1024; "none" skips the
# ablation), WARMUP_STEPS, WINDOWS, WINDOW_STEPS (default 30, 6, 20), STOKE_BENCH (a
# stoke-bench binary to use instead of building one), PYTHON (default python3).
set -uo pipefail
out="${OUT:-$PWD/bench-out}"
mkdir -p "$out"
here="$(cd "$(dirname "$0")" && pwd)"
python="${PYTHON:-python3}"
warmup="${WARMUP_STEPS:-30}"
windows="${WINDOWS:-6}"
window_steps="${WINDOW_STEPS:-20}"
job_timeout="${JOB_TIMEOUT:-300}"
py_modes="${PY_MODES:-eager compile compile-reduce-overhead compile-max-autotune-no-cudagraphs cuda-graph compile-cuda-graph compile-max-autotune-cuda-graph}"
py_once_modes="${PY_ONCE_MODES:-}"
repeats="${RUNS:-3}"
[ "${SKIP_PYTHON:-0}" = 1 ] && py_modes="" && py_once_modes=""
ablation="${ABLATION_MODEL:-mlp-1024}"
cases=""
for m in ${MODELS:-mlp-256 mlp-1024 mlp-4096 gpt2-small resnet50 resnet34-cifar fmnist-cnn}; do
  if [ "$m" = mlp ]; then cases="$cases mlp-256 mlp-1024 mlp-4096"; else cases="$cases $m"; fi
done
torch_version=$("$python" -c 'import torch; print(torch.__version__)' 2>/dev/null || echo '?')
gpu=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)

source "$here/cases.sh"
ensure_stoke_bench

# stoke-bench ends its windows on multiples of the window length, so it rounds warm-up up
# to one (and sets training.steps to cover it all); Python warms up as long.
warmup=$(((warmup + window_steps - 1) / window_steps * window_steps))
timing=(--warmup-steps "$warmup" --windows "$windows" --window-steps "$window_steps")
py_timing=(--warmup "$warmup" --windows "$windows" --window-steps "$window_steps")

results="$out/speed.jsonl"
: > "$results"
runs=0
# group case label impl -- command...: runs the command under the timeout and appends its
# JSON line, tagged, to $results; a run without one gets a line with its error instead.
run() {
  local group=$1 case=$2 label=$3 impl=$4
  shift 5
  runs=$((runs + 1))
  local log
  log="$out/speed-$(printf %02d "$runs")-$case-$impl.log"
  echo "[$(date +%T)] $group $case $label $impl: $*" >&2
  # A run that hangs must not take the whole session's GPU time with it.
  timeout -k 10 "$job_timeout" "$@" > "$log" 2>&1
  local rc=$?
  "$python" - "$log" "$rc" "$group" "$case" "$label" "$impl" "$job_timeout" >> "$results" <<'PY'
import json, os, sys
log, rc, group, case, label, impl, limit = sys.argv[1:8]
rc = int(rc)
lines = open(log, errors="replace").read().splitlines()
row = None
for line in reversed(lines):
    if line.startswith("{"):
        try:
            row = json.loads(line)
            break
        except ValueError:
            pass
if not isinstance(row, dict) or ("samples_per_second" not in row and "error" not in row):
    if rc in (124, 137):
        error = f"timed out after {limit} s"
    else:
        text = [l.strip() for l in lines if l.strip()]
        errors = [l for l in text if "error" in l.lower()]
        error = (errors or text or [f"exit status {rc}"])[-1]
    row = {"impl": impl, "error": error[:300]}
row.update(group=group, case=case, label=label, rc=rc, log=os.path.basename(log))
print(json.dumps(row))
PY
  tail -1 "$results" | "$python" -c '
import json, sys
r = json.loads(sys.stdin.read())
rate = r.get("samples_per_second") or 0
print("   ->", r.get("error") or "%.0f samples/s" % rate, file=sys.stderr)'
}

stoke_run() {  # group case label -- extra Stoke args...
  local group=$1 case=$2 label=$3
  shift 4
  run "$group" "$case" "$label" stoke -- "$bench" "$spec" ${sets[@]+"${sets[@]}"} "$@" \
    "${timing[@]}"
}

python_run() {  # group case label mode -- extra train_reference.py args...
  local group=$1 case=$2 label=$3 mode=$4
  shift 5
  run "$group" "$case" "$label" "python-$mode" -- "$python" "$here/python/train_reference.py" \
    "${py_args[@]}" --mode "$mode" "${py_timing[@]}" "$@"
}

skip() {  # group case why
  "$python" -c 'import json, sys; print(json.dumps({"group": sys.argv[1], "case": sys.argv[2],
    "impl": "stoke", "skipped": sys.argv[3]}))' "$@" >> "$results"
  echo "[$(date +%T)] $1 $2: skipped, $3" >&2
}

for c in $cases; do
  setup_case "$c"
  case $? in
    1) skip main "$c" "unknown case"; continue ;;
    2) skip main "$c" "FMNIST_DIR not set"; continue ;;
  esac
  # Runs take turns (Stoke, then each Python mode, then again), so that a slow spell of the
  # machine touches every implementation alike.
  for round in $(seq 1 "$repeats"); do
    stoke_run main "$c" "" --
    modes=$py_modes
    [ "$round" = 1 ] && modes="$py_modes $py_once_modes"
    for mode in $modes; do
      python_run main "$c" "" "$mode" -- --batch "$batch"
    done
  done
done

if [ "$ablation" != none ]; then
  if setup_case "$ablation"; then
    big=$((4 * batch))
    # Each row names all its settings, cumulatively: baseline, then one more change each.
    fp32=(--set training.precision=fp32)
    bf16=(--set training.precision=bf16)
    rest=(--set training.tf32=off --set training.cuda_graph=off)
    graph=(--set training.tf32=off --set training.cuda_graph=on)
    # Stoke's own CUDA kernels come last: every row before runs on ATen's operations.
    aten=(--set training.fused_kernels=off)
    loop=(--set optimizer.adamw.implementation=per_parameter)
    fused=(--set optimizer.adamw.implementation=fused)
    # Real data has a loader to switch off: one thread, one batch ahead, pageable buffers.
    unpiped=()
    [ "$ablation" = fmnist-cnn ] && unpiped=(--set data.loader.threads=1
      --set data.loader.prefetch=1 --set data.loader.pin_memory=false)
    stoke_run ablation "$ablation" baseline -- "${fp32[@]}" "${rest[@]}" "${loop[@]}" \
      "${aten[@]}" ${unpiped[@]+"${unpiped[@]}"} --set "training.batch_size=$batch"
    [ ${#unpiped[@]} -gt 0 ] && stoke_run ablation "$ablation" pipeline -- "${fp32[@]}" \
      "${rest[@]}" "${loop[@]}" "${aten[@]}" --set "training.batch_size=$batch"
    stoke_run ablation "$ablation" bf16 -- "${bf16[@]}" "${rest[@]}" "${loop[@]}" "${aten[@]}" \
      --set "training.batch_size=$batch"
    stoke_run ablation "$ablation" batch -- "${bf16[@]}" "${rest[@]}" "${loop[@]}" "${aten[@]}" \
      --set "training.batch_size=$big"
    stoke_run ablation "$ablation" fused -- "${bf16[@]}" "${rest[@]}" "${fused[@]}" "${aten[@]}" \
      --set "training.batch_size=$big"
    stoke_run ablation "$ablation" graph -- "${bf16[@]}" "${graph[@]}" "${fused[@]}" "${aten[@]}" \
      --set "training.batch_size=$big"
    stoke_run ablation "$ablation" kernels -- "${bf16[@]}" "${graph[@]}" "${fused[@]}" \
      --set "training.batch_size=$big"
    if [ -n "$py_modes" ]; then  # the nearest Python settings to each row
      python_run ablation "$ablation" baseline eager -- --batch "$batch" --fp32 --no-tf32 \
        --adamw for-loop
      python_run ablation "$ablation" bf16 eager -- --batch "$batch" --no-tf32 --adamw for-loop
      python_run ablation "$ablation" batch eager -- --batch "$big" --no-tf32 --adamw for-loop
      python_run ablation "$ablation" fused eager -- --batch "$big" --no-tf32 --adamw fused
      python_run ablation "$ablation" graph cuda-graph -- --batch "$big" --no-tf32 --adamw fused
      python_run ablation "$ablation" kernels compile-reduce-overhead -- --batch "$big" --no-tf32 \
        --adamw fused
    fi
  else
    skip ablation "$ablation" "cannot run this case (unknown, or FMNIST_DIR not set)"
  fi
fi

"$python" "$here/python/speed_table.py" "$results" "$gpu" "$torch_version" "$warmup" \
  "$windows" "$window_steps" "$py_modes $py_once_modes" "$repeats" | tee "$out/speed.md"
