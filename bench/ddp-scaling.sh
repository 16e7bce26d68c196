#!/usr/bin/env bash
# Multi-GPU scaling of Stoke against Python torchrun + DDP, on one GPU host, in one go:
# builds Stoke (build-gpu/), starts a coordinator with one worker per GPU, and for each
# model trains a gang-scheduled job on 1, 2, 4, ... GPUs (same per-GPU batch, synthetic
# data), then runs bench/python/ddp_train.py under torchrun on the same GPUs. Prints a
# Markdown table (also $OUT/ddp-scaling.md). From the repo root on the GPU machine:
#   source .gpu-deps/setup.sh && bench/ddp-scaling.sh
# Environment: MODELS (default "gpt2-small resnet50"), GPU_COUNTS (default 1 2 4 8 up to
# the GPUs present), STEPS (Stoke steps per job; default 240, the first 2 windows of 20
# are warm-up and dropped), SKIP_PYTHON=1 (Stoke only), SNAPSHOT_AFTER (seconds into each
# job to save `stoke top --once` and /metrics), CUDA_GRAPH (Stoke's training.cuda_graph,
# default off: jobs of several ranks train eagerly, so 1 and N GPUs are timed alike),
# SIDE_BY_SIDE (models for the side-by-side run; default the same models on hosts of 4 or
# more GPUs, "none" to skip): GPUs/2 jobs of 2 GPUs each are submitted at once and timed
# while they all train, against the 2-GPU job that ran alone just before. BUCKET_MB:
# the jobs' distributed.bucket_mb (default 25). STOKE_BIN: the folder of the
# stoke-coordinator, stoke-worker and stoke binaries to time (another build, to compare
# two versions in one run; default build-gpu/bin, built if missing). PY_ARGS: more
# arguments for ddp_train.py (e.g. "--compile max-autotune-no-cudagraphs"). Scaling
# efficiency = N-GPU samples/s / (N x the best 1-GPU samples/s of either runtime).
set -uo pipefail
out="${OUT:-$PWD/bench-out}"
mkdir -p "$out"
here="$(cd "$(dirname "$0")" && pwd)"
gpus_present=$(nvidia-smi -L | wc -l)
models="${MODELS:-gpt2-small resnet50}"
steps="${STEPS:-240}"
counts="${GPU_COUNTS:-}"
if [ -z "$counts" ]; then
  for n in 1 2 4 8; do [ "$n" -le "$gpus_present" ] && counts="$counts $n"; done
fi
torch_version=$(python3 -c 'import torch; print(torch.__version__)')
gpu_name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)

if [ ! -x build-gpu/bin/stoke-coordinator ]; then
  cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DSTOKE_WERROR=OFF \
    -DSTOKE_BUILD_TESTS=OFF > "$out/bench-build.log" 2>&1 &&
    grep "Stoke:" "$out/bench-build.log" &&
    ninja -C build-gpu stoke-coordinator stoke-worker stoke >> "$out/bench-build.log" 2>&1 ||
    { tail -40 "$out/bench-build.log"; exit 1; }
fi
bin="${STOKE_BIN:-build-gpu/bin}"

data=$(mktemp -d)
$bin/stoke-coordinator --address 127.0.0.1:0 --data-dir "$data" --local-workers auto \
  > "$out/bench-coordinator.log" 2>&1 &
coord=$!
trap 'kill -TERM $coord 2>/dev/null; wait $coord 2>/dev/null' EXIT
for _ in $(seq 1 120); do [ -f "$data/coordinator.address" ] && break; sleep 0.5; done
export STOKE_ADDRESS=$(cat "$data/coordinator.address")
for _ in $(seq 1 240); do
  [ "$($bin/stoke cluster -o json 2>/dev/null | grep -o DEVICE_TYPE_CUDA | wc -l)" -ge "$gpus_present" ] && break
  sleep 0.5
done

spec() {  # model gpus [name] -> a job file
  local model=$1 gpus=$2 name=${3:-$1-x$2}
  case $model in
    gpt2-small)
      echo "name: $name
model: {gpt: {layers: 12, heads: 12, width: 768}}
data: {synthetic: {vocab_size: 50304, context: 1024, samples_per_epoch: 100000000}}
optimizer: {adamw: {}, lr: 6.0e-4}
training: {steps: $steps, batch_size: ${GPT_BATCH:-16}, precision: bf16, cuda_graph: ${CUDA_GRAPH:-off}}" ;;
    resnet50)
      echo "name: $name
model: {resnet: {depth: 50}}
data: {synthetic: {image_shape: [3, 224, 224], num_classes: 1000, samples_per_epoch: 100000000}}
optimizer: {adamw: {}, lr: 1.0e-3}
training: {steps: $steps, batch_size: ${RESNET_BATCH:-256}, precision: bf16, cuda_graph: ${CUDA_GRAPH:-off}}" ;;
  esac
  echo "resources: {gpus: $gpus}
distributed: {bucket_mb: ${BUCKET_MB:-25}}
metrics: {interval_steps: 20}
eval: {batches: 1}
checkpoint: {interval_steps: 100000, keep: 1}"
}

batch_of() { [ "$1" = gpt2-small ] && echo "${GPT_BATCH:-16}" || echo "${RESNET_BATCH:-256}"; }

# One JSON line for a finished Stoke job from its events: the median of rank 0's metric
# windows after two warm-up windows, without the partial last one.
record() {  # events.jsonl model gpus runtime [extra JSON fields]
  python3 - "$1" "$2" "$3" "$(batch_of "$2")" "$4" "${5:-}" <<'PY'
import json, statistics, sys
path, model, gpus, batch, runtime, extra = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5], sys.argv[6]
rates, comm, state = [], [], "?"
for line in open(path):
    e = json.loads(line)
    m = e.get("metrics")
    if m and "eval" not in m and int(m.get("rank", 0)) == 0:
        rates.append(m.get("samples_per_second", 0)); comm.append(m.get("comm_wait_ratio", 0))
    if "state_change" in e:
        state = e["state_change"]["state"]
rates, comm = rates[2:-1] or rates, comm[2:-1] or comm  # drop warm-up and the partial last
row = {"runtime": runtime, "model": model, "gpus": gpus, "batch_per_gpu": batch,
       "samples_per_second": statistics.median(rates) if rates else 0,
       "comm_wait_ratio": statistics.median(comm) if comm else 0, "state": state}
row.update(json.loads(extra) if extra else {})
print(json.dumps(row))
PY
}

results="$out/ddp-results.jsonl"
: > "$results"
for model in $models; do
  for gpus in $counts; do
    spec "$model" "$gpus" > "$out/$model-x$gpus.yaml"
    id=$($bin/stoke submit "$out/$model-x$gpus.yaml" | head -1)
    # Telemetry while it trains: what `stoke top` and /metrics show.
    (sleep "${SNAPSHOT_AFTER:-20}"
     $bin/stoke top --once > "$out/top-$model-x$gpus.txt" 2>&1
     python3 -c 'import sys, urllib.request; print(urllib.request.urlopen("http://" + sys.argv[1] + "/metrics").read().decode())' \
       "$(cat "$data/metrics.address")" > "$out/metrics-$model-x$gpus.txt" 2>&1) &
    # A run that hangs must not take the whole session's GPU time with it.
    if ! timeout "${JOB_TIMEOUT:-150}" $bin/stoke watch "$id" > "$out/stoke-$model-x$gpus.log" 2>&1; then
      $bin/stoke cancel "$id" --reason "benchmark timeout" > /dev/null 2>&1
      sleep 3
    fi
    $bin/stoke -o json watch "$id" > "$out/stoke-$model-x$gpus.events.jsonl"
    record "$out/stoke-$model-x$gpus.events.jsonl" "$model" "$gpus" stoke >> "$results"
    tail -1 "$results"
    [ "${SKIP_PYTHON:-0}" = 1 ] && continue
    (cd "$here/python" && timeout "${JOB_TIMEOUT:-150}" python3 -m torch.distributed.run \
      --standalone --nproc-per-node "$gpus" \
      ddp_train.py --model "$model" --batch "$(batch_of "$model")" ${PY_ARGS:-}) \
      > "$out/python-$model-x$gpus.log" 2>&1
    grep '^{' "$out/python-$model-x$gpus.log" | tail -1 >> "$results"
    tail -1 "$results"
  done
done

# Side by side: GPUs/2 jobs of 2 GPUs submitted at once must each get a pair of their own
# and train as fast as the 2-GPU job did alone.
side_models="${SIDE_BY_SIDE:-}"
[ -z "$side_models" ] && [ "$gpus_present" -ge 4 ] && side_models="$models"
[ "$side_models" = none ] && side_models=""
for model in $side_models; do
  ids=()
  for j in $(seq 1 $((gpus_present / 2))); do
    spec "$model" 2 "$model-pair$j" > "$out/$model-pair$j.yaml"
    ids+=("$($bin/stoke submit "$out/$model-pair$j.yaml" | head -1)")
  done
  (sleep "${SNAPSHOT_AFTER:-20}"; $bin/stoke top --once > "$out/top-$model-pairs.txt" 2>&1
   for id in "${ids[@]}"; do $bin/stoke status "$id"; done > "$out/status-$model-pairs.txt" 2>&1) &
  watchers=()
  for j in "${!ids[@]}"; do
    timeout "${JOB_TIMEOUT:-150}" $bin/stoke watch "${ids[$j]}" > "$out/stoke-$model-pair$((j + 1)).log" 2>&1 &
    watchers+=($!)
  done
  wait "${watchers[@]}"  # not a bare wait: the coordinator is a child of this shell too
  for j in "${!ids[@]}"; do
    id=${ids[$j]}
    $bin/stoke cancel "$id" --reason "benchmark timeout" > /dev/null 2>&1
    $bin/stoke -o json watch "$id" > "$out/stoke-$model-pair$((j + 1)).events.jsonl"
    devices=$($bin/stoke -o json status "$id" | python3 -c '
import json, sys
job = json.load(sys.stdin)
print(",".join(p.get("device", {}).get("index", "0").__str__() for p in job.get("placement", [])))')
    record "$out/stoke-$model-pair$((j + 1)).events.jsonl" "$model" 2 stoke-side-by-side \
      "{\"job\": $((j + 1)), \"devices\": \"$devices\"}" >> "$results"
    tail -1 "$results"
  done
done

python3 - "$results" "$gpu_name" "$torch_version" <<'PY' | tee "$out/ddp-scaling.md"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
get = lambda rt, m, g: next((r for r in rows if r["runtime"] == rt and r["model"] == m and r["gpus"] == g), None)
print(f"GPU: {sys.argv[2]}, torch {sys.argv[3]}\n")
print("| model | GPUs | batch/GPU | Stoke samples/s | scaling eff. | comm not hidden | torchrun DDP samples/s | DDP scaling eff. | Stoke / DDP |")
print("|---|---|---|---|---|---|---|---|---|")
for m in dict.fromkeys(r["model"] for r in rows):
    # Both sides against one yardstick: the faster single GPU of the two. Each against its
    # own 1-GPU rate would flatter the slower runtime.
    s1, p1 = get("stoke", m, 1), get("python-ddp", m, 1)
    best1 = max(s1["samples_per_second"] if s1 else 0, p1["samples_per_second"] if p1 else 0)
    for g in sorted({r["gpus"] for r in rows if r["model"] == m}):
        s, p = get("stoke", m, g), get("python-ddp", m, g)
        sr = s["samples_per_second"] if s else 0
        pr = p["samples_per_second"] if p else 0
        eff = lambda r: f"{100 * r / (g * best1):.1f}%" if r and best1 else "-"
        print(f"| {m} | {g} | {(s or p or {}).get('batch_per_gpu', '-')} | {sr:,.0f} | "
              f"{eff(sr)} | "
              f"{100 * s['comm_wait_ratio']:.1f}% | " if s else f"| {m} | {g} | - | - | - | - | ", end="")
        print(f"{pr:,.0f} | {eff(pr)} | "
              f"{(sr / pr if pr else 0):.2f}x |")
side = [r for r in rows if r["runtime"] == "stoke-side-by-side"]
if side:
    print("\nSide by side: jobs of 2 GPUs submitted at once\n")
    print("| model | job | devices | state | samples/s | the 2-GPU job alone | side by side / alone |")
    print("|---|---|---|---|---|---|---|")
    for r in side:
        alone = get("stoke", r["model"], 2)
        a = alone["samples_per_second"] if alone else 0
        print(f"| {r['model']} | {r['job']} | {r['devices']} | {r['state']} | {r['samples_per_second']:,.0f} | "
              f"{a:,.0f} | {(r['samples_per_second'] / a if a else 0):.3f} |")
PY
