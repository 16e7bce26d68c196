#!/usr/bin/env bash
# A coordinator upgrade while a job trains, shown end to end: start a coordinator (data
# dir in a temp folder) with its local workers (CUDA if present, else CPU), submit a real
# job (the Fashion-MNIST CNN where Debian's dataset-fashion-mnist is installed, else the
# synthetic MLP), let it train some steps, stop the coordinator (SIGTERM: the workers train
# on), start a copy of its binary (standing in for the new version) on the same data dir
# and port, and let the job finish. Then it checks, and exits non-zero if any fails:
#   - the job SUCCEEDED in attempt 1 with 0 restarts;
#   - its metric samples cover the steps without a hole or a repeat across the upgrade;
#   - training went on while no coordinator ran (samples from the outage exist).
# It prints how long no coordinator answered and the longest gap between samples (the
# worker's clock) beside the usual one, and writes the loss curve to $OUT_DIR/loss.csv
# (step,loss) and the job's events to $OUT_DIR/events.jsonl.
# From the repository root, with build/bin built:
#   bench/upgrade.sh
# Environment: OUT_DIR (default: a temp folder), STEPS and METRICS_INTERVAL (defaults by
# device: CPU 200 and 5, CUDA 15000 and 100), DATA (fashion-mnist or synthetic).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bin="$root/build/bin"
for b in stoke-coordinator stoke-worker stoke; do
  [ -x "$bin/$b" ] || { echo "upgrade.sh: $bin/$b is missing; build it first" >&2; exit 2; }
done
work="$(mktemp -d "${TMPDIR:-/tmp}/stoke-upgrade.XXXXXX")"
out="${OUT_DIR:-$work/out}"
mkdir -p "$out"
data_dir="$work/data"
mkdir -p "$data_dir"
coordinator_pid=""

cleanup() {
  [ -n "$coordinator_pid" ] && kill "$coordinator_pid" 2>/dev/null && wait "$coordinator_pid" 2>/dev/null
  # The local workers outlive a coordinator by design; this run's go with it.
  "$bin/stoke-coordinator" --stop-workers --data-dir "$data_dir" >/dev/null 2>&1 || true
}
trap cleanup EXIT

fail() {
  echo "FAIL: $*" >&2
  echo "(coordinator logs and worker logs: $data_dir)" >&2
  trap - EXIT
  cleanup
  exit 1
}

# CUDA if this build's worker sees a GPU.
if [ -n "$("$bin/stoke-worker" --list-devices 2>/dev/null | grep '^cuda:' || true)" ]; then
  device=cuda
  steps="${STEPS:-15000}"
  interval="${METRICS_INTERVAL:-100}"
else
  device=cpu
  steps="${STEPS:-200}"
  interval="${METRICS_INTERVAL:-5}"
fi
fashion=/usr/share/datasets/fashion-mnist
data="${DATA:-$([ -f "$fashion/train-images-idx3-ubyte.gz" ] && echo fashion-mnist || echo synthetic)}"
spec="$work/upgrade-demo.yaml"
if [ "$data" = fashion-mnist ]; then
  cat >"$spec" <<EOF
name: upgrade-demo
model:
  cnn:
    channels: [16, 32]
    hidden: 64
data:
  mnist:
    path: $fashion
optimizer:
  adamw: {}
  lr: 0.002
training:
  steps: $steps
  batch_size: 128
metrics:
  interval_steps: $interval
EOF
else
  cat >"$spec" <<EOF
name: upgrade-demo
model:
  mlp:
    hidden: [512, 512]
data:
  synthetic:
    features: 128
    num_classes: 10
optimizer:
  adamw: {}
  lr: 0.001
training:
  steps: $steps
  batch_size: 256
metrics:
  interval_steps: $interval
EOF
fi

# Starts a coordinator binary on the data dir; $1: the binary, $2: the listen address.
start_coordinator() {
  "$1" --address "$2" --data-dir "$data_dir" --worker-binary "$bin/stoke-worker" \
    --metrics-address 127.0.0.1:0 >>"$data_dir/coordinator.log" 2>&1 </dev/null &
  coordinator_pid=$!
}
# Waits until a coordinator answers at $STOKE_ADDRESS with at least one worker attached.
wait_for_workers() {
  for _ in $(seq 1 600); do
    if "$bin/stoke" cluster -o json 2>/dev/null | grep -q '"id"'; then return 0; fi
    kill -0 "$coordinator_pid" 2>/dev/null || fail "the coordinator exited at start"
    sleep 0.1
  done
  fail "no worker attached within 60 s"
}
# Prints a field of the job's status (a Python expression over `job`, the JSON object).
job_field() {
  "$bin/stoke" status "$job" -o json 2>/dev/null |
    python3 -c "import json, sys; job = json.load(sys.stdin); print($1)"
}

echo "==> coordinator (data in $data_dir), local $device workers"
start_coordinator "$bin/stoke-coordinator" 127.0.0.1:0
for _ in $(seq 1 100); do [ -s "$data_dir/coordinator.address" ] && break; sleep 0.1; done
[ -s "$data_dir/coordinator.address" ] || fail "the coordinator wrote no address"
address="$(cat "$data_dir/coordinator.address")"
export STOKE_ADDRESS="$address"
wait_for_workers

job="$("$bin/stoke" submit "$spec" 2>/dev/null | head -1)"
[ -n "$job" ] || fail "submit gave no job id"
echo "==> job $job: $data, $steps steps, a sample every $interval"
upgrade_at=$((steps / 5))
for _ in $(seq 1 1200); do
  step="$(job_field "int(job.get('latest_metrics', {}).get('step', 0))" || echo 0)"
  [ "${step:-0}" -ge "$upgrade_at" ] && break
  sleep 0.1
done
[ "${step:-0}" -ge "$upgrade_at" ] || fail "job $job did not reach step $upgrade_at within 120 s"
seen_at="$(date +%s.%N)"

echo "==> at step $step: stopping the coordinator (SIGTERM)"
new_binary="$work/new/stoke-coordinator"
mkdir -p "$(dirname "$new_binary")"
cp "$bin/stoke-coordinator" "$new_binary"
down_at="$(date +%s.%N)"
kill -TERM "$coordinator_pid"
wait "$coordinator_pid" 2>/dev/null || true
coordinator_pid=""
echo "==> starting the new binary ($new_binary) on $address"
start_coordinator "$new_binary" "$address"
wait_for_workers
up_at="$(date +%s.%N)"
state="$(job_field "job['state']")"
step_after="$(job_field "int(job.get('latest_metrics', {}).get('step', 0))")"
echo "==> new coordinator answering; job $job is $state at step $step_after"
[ "$state" = JOB_STATE_RUNNING ] || fail "job $job was $state right after the upgrade, not RUNNING (raise STEPS so that it trains across the upgrade)"

"$bin/stoke" watch "$job" >/dev/null 2>&1 || true
"$bin/stoke" watch "$job" -o json >"$out/events.jsonl" 2>/dev/null || true
"$bin/stoke" status "$job" -o json >"$out/job.json"

python3 - "$out" "$steps" "$interval" "$seen_at" "$down_at" "$up_at" "$step" <<'PY'
import json, statistics, sys
out, steps, interval, seen_at, down_at, up_at, upgrade_step = sys.argv[1:8]
steps, interval, upgrade_step = int(steps), int(interval), int(upgrade_step)
seen_at, down_at, up_at = float(seen_at), float(down_at), float(up_at)
job = json.load(open(f"{out}/job.json"))
events = [json.loads(line) for line in open(f"{out}/events.jsonl") if line.strip()]
samples = [e["metrics"] for e in events
           if "metrics" in e and "eval" not in e["metrics"] and e["metrics"].get("rank", 0) == 0]
failures = []

state, attempt, restarts = job["state"], job.get("attempt", 0), job.get("restarts", 0)
print(f"state {state}, attempt {attempt}, restarts {restarts}")
if state != "JOB_STATE_SUCCEEDED":
    failures.append(f"the job ended {state}: {job.get('message', '')}")
if attempt != 1 or restarts != 0:
    failures.append(f"attempt {attempt} with {restarts} restarts; an upgrade must cost neither")

# One sample per window: every interval steps, and the last step.
got = [int(s["step"]) for s in samples]
want = list(range(interval, steps + 1, interval))
if not want or want[-1] != steps:
    want.append(steps)
repeated = sorted({s for s in got if got.count(s) > 1})
missing = sorted(set(want) - set(got))
print(f"metric samples: {len(got)} (expected {len(want)}), steps {got[0] if got else '-'}..{got[-1] if got else '-'}")
if repeated:
    failures.append(f"steps repeated: {repeated[:10]}")
if missing:
    failures.append(f"steps missing: {missing[:10]}{' ...' if len(missing) > 10 else ''}")
if got != sorted(got):
    failures.append("samples out of step order")

# The worker's clock (seconds since the loop started) shows whether training paused.
elapsed = [float(s.get("elapsed_seconds", 0)) for s in samples]
gaps = [b - a for a, b in zip(elapsed, elapsed[1:])]
outage = up_at - down_at
print(f"no coordinator answering for {outage:.2f} s (SIGTERM -> the new one serving, workers attached)")
if gaps:
    widest = max(range(len(gaps)), key=lambda i: gaps[i])
    print(f"samples' spacing (worker clock): median {statistics.median(gaps):.3f} s, "
          f"widest {gaps[widest]:.3f} s (steps {got[widest]} -> {got[widest + 1]})")
# The worker's clock against the wall clock: the sample of upgrade_step had reached the
# coordinator when the script saw it (seen_at), a flush interval or so after it was made.
# Samples whose worker time falls between the stop and the new coordinator serving were
# made while no coordinator ran, and reached the new one: the worker trained on.
if upgrade_step in got:
    origin = elapsed[got.index(upgrade_step)] - seen_at
    during = [got[i] for i, e in enumerate(elapsed) if down_at <= e - origin <= up_at]
    print(f"samples made while no coordinator ran: {len(during)}"
          + (f" (steps {during[0]}..{during[-1]})" if during else ""))
    if not during and gaps and outage > 3 * statistics.median(gaps):
        failures.append("no sample was made while the coordinator was down: training paused")
else:
    failures.append(f"the sample at step {upgrade_step}, seen before the stop, is gone")

with open(f"{out}/loss.csv", "w") as f:
    f.write("step,loss\n")
    for s in samples:
        f.write(f"{int(s['step'])},{float(s.get('loss', 0)):.6f}\n")
print(f"loss curve: {out}/loss.csv ({len(samples)} points; first {samples[0].get('loss', 0):.4f}, "
      f"last {samples[-1].get('loss', 0):.4f})" if samples else "loss curve: no samples")
for f in failures:
    print("FAIL:", f)
if failures:
    sys.exit(1)
print("PASS: the upgrade cost the job no step and no restart")
PY
