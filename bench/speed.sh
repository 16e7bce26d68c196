#!/usr/bin/env bash
# Single-GPU speed: Stoke's C++ engine against PyTorch best practice in Python, same model,
# batch, hyper-parameters and data. Per case, build-gpu/bin/stoke-bench trains the spec in
# bench/specs/ and bench/python/train_reference.py trains the same network
# (bench/python/models.py) eagerly, under torch.compile, under
# torch.compile(mode="reduce-overhead"), and compiled with the whole step (forward,
# backward, AdamW) captured as one CUDA graph (compile-cuda-graph); each warms up 30 steps
# (rounded up to whole windows: 40), then times 6 windows of 20 steps between CUDA events
# and reports the median window. Then an ablation on one model: what each of Stoke's
# settings adds, from an fp32 eager baseline on ATen's operations to Stoke's own CUDA
# kernels last (`training.fused_kernels`). Prints two Markdown tables (also
# $OUT/speed.md; raw JSON lines in $OUT/speed.jsonl, each run's log beside them). From the
# repo root on the GPU machine:
#   source .gpu-deps/setup.sh && bench/speed.sh
# Environment: MODELS (default "mlp-256 mlp-1024 mlp-4096 gpt2-small resnet50 fmnist-cnn";
# "mlp" is the three MLPs), FMNIST_DIR (Fashion-MNIST's idx files; without it fmnist-cnn is
# skipped), SKIP_PYTHON=1 (Stoke only), PY_MODES (default "eager compile
# compile-reduce-overhead compile-cuda-graph"; also cuda-graph: the eager model captured
# whole), JOB_TIMEOUT (seconds per run, default 300), ABLATION_MODEL (default mlp-1024;
# "none" skips the ablation), WARMUP_STEPS, WINDOWS, WINDOW_STEPS (default 30, 6, 20),
# STOKE_BENCH (a stoke-bench binary to use instead of building one), PYTHON (default
# python3).
set -uo pipefail
out="${OUT:-$PWD/bench-out}"
mkdir -p "$out"
here="$(cd "$(dirname "$0")" && pwd)"
python="${PYTHON:-python3}"
warmup="${WARMUP_STEPS:-30}"
windows="${WINDOWS:-6}"
window_steps="${WINDOW_STEPS:-20}"
job_timeout="${JOB_TIMEOUT:-300}"
py_modes="${PY_MODES:-eager compile compile-reduce-overhead compile-cuda-graph}"
[ "${SKIP_PYTHON:-0}" = 1 ] && py_modes=""
ablation="${ABLATION_MODEL:-mlp-1024}"
cases=""
for m in ${MODELS:-mlp-256 mlp-1024 mlp-4096 gpt2-small resnet50 fmnist-cnn}; do
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
  stoke_run main "$c" "" --
  for mode in $py_modes; do
    python_run main "$c" "" "$mode" -- --batch "$batch"
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

"$python" - "$results" "$gpu" "$torch_version" "$warmup" "$windows" "$window_steps" \
  "$py_modes" <<'PY' | tee "$out/speed.md"
import datetime, json, sys
path, gpu, torch_version, warmup, windows, window_steps, py_modes = sys.argv[1:8]
rows = [json.loads(l) for l in open(path) if l.strip()]
MODES = ["eager", "compile", "compile-reduce-overhead", "cuda-graph", "compile-cuda-graph"]
TITLES = {"eager": "Python eager", "compile": "Python compile",
          "compile-reduce-overhead": "Python compile reduce-overhead",
          "cuda-graph": "Python eager + whole-step CUDA graph",
          "compile-cuda-graph": "Python compile + whole-step CUDA graph"}
BATCH = {"gpt2-small": 16, "resnet50": 256, "fmnist-cnn": 256}


def name(case):
    if case.startswith("mlp-"):
        d = int(case[4:])
        return f"MLP d={d} ({d}→{4 * d}→{d}→10)"
    return {"gpt2-small": "GPT-2 small (context 1024)", "resnet50": "ResNet-50 (224×224)",
            "fmnist-cnn": "Fashion-MNIST CNN (real data)"}.get(case, case)


def ok(r):
    return r is not None and "error" not in r and "skipped" not in r and \
        r.get("samples_per_second") is not None


def cell(r, fmt=lambda r: f"{r['samples_per_second']:,.0f}"):
    if r is None:
        return "-"
    if "skipped" in r:
        return f"skipped: {r['skipped']}"
    if "error" in r:
        text = " ".join(str(r["error"]).split())
        return "error: " + (text[:90] + "…" if len(text) > 90 else text).replace("|", "\\|")
    try:
        return fmt(r)
    except (KeyError, TypeError, ValueError):
        return "?"


def find(group, case, impl, label=""):
    return next((r for r in rows if r.get("group") == group and r.get("case") == case
                 and r.get("impl") == impl and r.get("label", "") == label), None)


def ms(r):
    v = r["step_ms"]
    return f"{v:.3g}" if v < 100 else f"{v:.0f}"


print(f"GPU: {gpu or '?'}; torch {torch_version}; {datetime.date.today()}. One run per cell: "
      f"{warmup} warm-up steps, then the median of {windows} windows of {window_steps} steps, "
      "each timed between CUDA events. Stoke: `build-gpu/bin/stoke-bench` on the spec in "
      "`bench/specs/`; Python: `bench/python/train_reference.py` (bf16 autocast, fused AdamW, "
      "TF32, cudnn.benchmark, channels_last for CNNs; whole-step CUDA graphs by "
      "`torch.cuda.graph` capture of forward, backward and capturable fused AdamW). MFU against "
      "989 TFLOP/s dense bf16; model FLOPs counted as Stoke counts them (6 × multiply-adds; "
      "GPT by PaLM's formula).\n")
main_cases = list(dict.fromkeys(r["case"] for r in rows if r.get("group") == "main"))
shown = [m for m in MODES if m in py_modes.split() or any(
    r.get("group") == "main" and r.get("impl") == f"python-{m}" for r in rows)]
print("| model | batch | Stoke samples/s | best Python samples/s (mode) | Stoke / best Python "
      "| Stoke step ms | Stoke peak memory GiB | Stoke TFLOP/s | Stoke MFU | "
      + " | ".join(TITLES[m] for m in shown) + " |")
print("|---|---|---|---|---|---|---|---|---|" + "---|" * len(shown))
notes = []
for case in main_cases:
    s = find("main", case, "stoke")
    py = {m: find("main", case, f"python-{m}") for m in MODES}
    done = {m: r for m, r in py.items() if ok(r)}
    best = max(done, key=lambda m: done[m]["samples_per_second"]) if done else None
    batch = next((r["batch"] for r in [s, *py.values()] if ok(r) and "batch" in r),
                 BATCH.get(case, 512 if case.startswith("mlp-") else "-"))
    best_cell = (f"{done[best]['samples_per_second']:,.0f} ({best})" if best else "-")
    ratio = (f"{s['samples_per_second'] / done[best]['samples_per_second']:.2f}×"
             if ok(s) and best else "-")
    stoke_extra = [cell(s, ms), cell(s, lambda r: f"{r['peak_memory_bytes'] / 2**30:.2f}"),
                   cell(s, lambda r: f"{r['tflops']:.1f}"),
                   cell(s, lambda r: f"{100 * r['mfu']:.1f}%")] if ok(s) else ["-"] * 4
    py_cells = [cell(py[m]) if m in py_modes.split() or py[m] else "not run" for m in shown]
    print(f"| {name(case)} | {batch} | {cell(s)} | {best_cell} | {ratio} | "
          + " | ".join(stoke_extra) + " | " + " | ".join(py_cells) + " |")
    if ok(s):
        wait = s.get("data_wait_ratio")
        graph = {True: "captured as one CUDA graph", False: "not captured (eager)"}.get(
            s.get("cuda_graph"), "capture not reported")
        notes.append(f"{name(case)}: Stoke step {graph}"
                     + (f", data wait {100 * wait:.2f}% of step time" if wait is not None else ""))
    for m, r in py.items():
        if ok(r) and r.get("notes"):
            notes.append(f"{name(case)}, Python {m}: " + "; ".join(r["notes"]))
if notes:
    print("\n" + "\n".join(f"- {n}" for n in notes))

abl = [r for r in rows if r.get("group") == "ablation"]
if abl and "skipped" in abl[0]:
    print(f"\nAblation ({abl[0]['case']}): skipped, {abl[0]['skipped']}.")
elif abl:
    case = abl[0]["case"]
    s_base = find("ablation", case, "stoke", "baseline")
    big = next((r["batch"] for r in abl if r.get("label") == "batch" and ok(r)), "4× batch")
    piped = find("ablation", case, "stoke", "pipeline") is not None
    steps = [("baseline", "fp32, TF32 off, per-parameter AdamW, no CUDA graph"
              + (", loader of 1 thread, 1 batch ahead, pageable memory" if piped else ""),
              "python-eager", "eager, fp32, TF32 off, for-loop AdamW"),
             *([("pipeline", "+ data pipeline (loader threads, 4 batches ahead, pinned "
                 "memory, copies on their own stream)", "python-eager",
                 "(same as above: the Python reference keeps the data set on the GPU)")]
               if piped else []),
             ("bf16", "+ bf16 autocast", "python-eager", "eager, bf16, TF32 off, for-loop AdamW"),
             ("batch", f"+ larger batch (×4: {big})", "python-eager",
              "eager, bf16, TF32 off, for-loop AdamW, ×4 batch"),
             ("fused", "+ fused AdamW (`optimizer.adamw.implementation=fused`)", "python-eager",
              "eager, bf16, TF32 off, fused AdamW, ×4 batch"),
             ("graph", "+ whole-step CUDA graph (`training.cuda_graph=on`)", "python-cuda-graph",
              "eager + whole-step CUDA graph, bf16, TF32 off, fused AdamW, ×4 batch"),
             ("kernels", "+ Stoke's own CUDA kernels (`training.fused_kernels=on`)",
              "python-compile-reduce-overhead",
              "`torch.compile(mode=\"reduce-overhead\")` (Inductor's fused kernels), bf16, "
              "TF32 off, fused AdamW, ×4 batch")]
    print(f"\nAblation, {name(case)}: Stoke's settings added one at a time (each row keeps the "
          "ones above it; all but the last on ATen's operations, `training.fused_kernels=off`); "
          "same timing as above.\n")
    print("| step | Stoke samples/s | × baseline | × previous row | Python, nearest settings "
          "| Python samples/s |")
    print("|---|---|---|---|---|---|")
    prev = s_base
    for label, what, impl, py_what in steps:
        s, p = find("ablation", case, "stoke", label), find("ablation", case, impl, label)
        times = lambda a: (f"{s['samples_per_second'] / a['samples_per_second']:.2f}×"
                           if ok(s) and ok(a) else "-")
        versus_prev = times(prev) if label != "baseline" else "-"
        print(f"| {what} | {cell(s)} | {times(s_base)} | {versus_prev} | {py_what} | {cell(p)} |")
        prev = s
    if not piped:
        print("\nData pipeline: no row — the data are synthetic, made on the GPU each step (no "
              "loader threads, no host-to-device copy), so there is no pipeline to switch on.")
    waits = [(label, find("ablation", case, "stoke", label)) for label, *_ in steps]
    print("\nStoke's data wait (share of step time the device waited for batches): " + ", ".join(
        f"{label} {100 * r['data_wait_ratio']:.1f}%" for label, r in waits
        if ok(r) and r.get("data_wait_ratio") is not None) + ".")
PY
