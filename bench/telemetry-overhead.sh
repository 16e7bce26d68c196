#!/usr/bin/env bash
# What telemetry costs training: the same job, runs alternating between modes.
#   on:  as a user gets it: the worker reads its device every second (NVML on GPUs, /proc
#        on CPUs) and the job reports a metrics sample every 50 steps (the default: device-
#        side loss sums, pinned copies, events), streamed to the coordinator;
#   off: no device readings (stoke-worker --device-sampling 0) and one sample at the end;
#   and, to tell the costs apart: nvml-only (device readings, one sample at the end),
#   metrics-only (samples every 50 steps, no device readings), on-20 (a sample every 20
#   steps with device readings).
# A run's throughput is its samples over the device time of the whole run (the last
# sample's elapsed_seconds, timed between CUDA events on GPUs), so every mode is measured
# the same way. Prints each mode's median and its difference from off; also
# $OUT/telemetry-overhead.md. From the repo root (GPU machine: `source
# .gpu-deps/setup.sh` first):
#   bench/telemetry-overhead.sh
# Environment: DEVICE (default cuda:0 when nvidia-smi works, else cpu), RUNS (per mode,
# default 6), STEPS (default 30000), MODES (default "on off"), BIN (default build-gpu/bin,
# else build/bin).
set -uo pipefail
out="${OUT:-$PWD/bench-out}"
mkdir -p "$out"
if [ -z "${DEVICE:-}" ]; then
  if nvidia-smi -L > /dev/null 2>&1; then DEVICE=cuda:0; else DEVICE=cpu; fi
fi
runs="${RUNS:-6}"
steps="${STEPS:-30000}"
modes="${MODES:-on off}"
bin="${BIN:-}"
if [ -z "$bin" ]; then [ -x build-gpu/bin/stoke ] && bin=build-gpu/bin || bin=build/bin; fi
if [ ! -x "$bin/stoke-worker" ]; then
  echo "no Stoke binaries in $bin: build first (scripts/build.sh, or bench/ddp-scaling.sh on the GPU machine)" >&2
  exit 1
fi

data=$(mktemp -d)
"$bin/stoke-coordinator" --address 127.0.0.1:0 --data-dir "$data" --local-workers 0 \
  --metrics-address "" > "$out/telemetry-coordinator.log" 2>&1 &
coord=$!
worker=""
trap '[ -n "$worker" ] && kill -TERM $worker 2>/dev/null; kill -TERM $coord 2>/dev/null; wait 2>/dev/null' EXIT
for _ in $(seq 1 120); do [ -f "$data/coordinator.address" ] && break; sleep 0.5; done
export STOKE_ADDRESS=$(cat "$data/coordinator.address")

# A launch-bound model (an MLP on synthetic data), where per-step overhead would show most.
job() {  # mode interval -> job file (interval "default": the coordinator's)
  local metrics="metrics: {interval_steps: $2}"
  [ "$2" = default ] && metrics=""
  echo "name: telemetry-$1
model: {mlp: {hidden: [4096, 1024]}}
data: {synthetic: {features: 1024}}
training: {steps: $steps, batch_size: 512}
$metrics
eval: {batches: 1}
checkpoint: {interval_steps: 1000000}"
}
sampling_of() {  # mode -> device readings per second (1 or 0)
  case $1 in on|nvml-only|on-20) echo 1 ;; *) echo 0 ;; esac
}
for mode in $modes; do
  case $mode in
    on|metrics-only) job "$mode" default ;;
    on-20) job "$mode" 20 ;;
    off|nvml-only) job "$mode" "$steps" ;;
    *) echo "unknown mode $mode" >&2; exit 1 ;;
  esac > "$out/telemetry-$mode.yaml"
done

rate_of() {  # job id -> samples/s over the whole run
  "$bin/stoke" -o json watch "$1" | python3 -c '
import json, sys
last = None
for line in sys.stdin:
    m = json.loads(line).get("metrics")
    if m and "eval" not in m:
        last = m
print(int(last["step"]) * 512 / float(last["elapsed_seconds"]))'
}

: > "$out/telemetry-runs.txt"
for run in $(seq 1 "$runs"); do
  for mode in $modes; do
    sampling=$(sampling_of "$mode")
    "$bin/stoke-worker" --device "$DEVICE" --id "bench-$mode" --device-sampling "$sampling" \
      >> "$out/telemetry-worker.log" 2>&1 &
    worker=$!
    for _ in $(seq 1 120); do
      "$bin/stoke" cluster -o json 2>/dev/null | grep -q "bench-$mode" && break
      sleep 0.5
    done
    id=$("$bin/stoke" submit "$out/telemetry-$mode.yaml" | head -1)
    "$bin/stoke" watch "$id" > /dev/null 2>&1
    echo "$mode $(rate_of "$id")" | tee -a "$out/telemetry-runs.txt"
    kill -TERM $worker; wait $worker 2>/dev/null
    worker=""
  done
done

python3 - "$out/telemetry-runs.txt" "$DEVICE" "$steps" <<'PY' | tee "$out/telemetry-overhead.md"
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    mode, rate = line.split()
    runs.setdefault(mode, []).append(float(rate))
print(f"device {sys.argv[2]}, {sys.argv[3]} steps per run, {max(map(len, runs.values()))} runs per mode")
print("| telemetry | median samples/s | vs off | runs |")
print("|---|---|---|---|")
off = statistics.median(runs["off"]) if "off" in runs else None
for mode, rates in runs.items():
    median = statistics.median(rates)
    versus = f"{100 * (median / off - 1):+.2f}%" if off else "-"
    print(f"| {mode} | {median:,.0f} | {versus} | {', '.join(f'{r:,.0f}' for r in rates)} |")
PY
