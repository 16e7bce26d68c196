#!/usr/bin/env bash
# Wall time from `stoke submit` to the first evaluation at or above a target accuracy, the
# way a user pays for it: a coordinator with its local worker already up (warm), the job
# submitted through the CLI, the clock read from the job's own events (the submit's
# PENDING event to the first eval event at or above TARGET). Then, unless SKIP_PYTHON=1,
# bench/python/time_to_accuracy.py trains the same recipe in PyTorch from process start
# (imports and compilation included) in each of PY_MODES.
# From the repository root, after building (build/bin):
#   bench/time-to-accuracy.sh [SPEC ...]      (default: examples/fashion-mnist-fast.yaml)
# Environment: TARGET (default 0.94), FMNIST_DIR (Fashion-MNIST's idx files; default the
# spec's path, or .gpu-data/fashion-mnist when that exists), RUNS (submissions per spec,
# default 3), PY_RUNS (runs of each Python mode, default RUNS), PY_MODES (default "eager
# compile cuda-graph compile-cuda-graph"), PYTHON, STOKE_BIN (default build/bin),
# JOB_TIMEOUT (s, default 300). Output: one line per run, then a summary; logs and each
# job's events in $OUT (default ./bench-out).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
root=$PWD
out="${OUT:-$root/bench-out}"
mkdir -p "$out"
bin="${STOKE_BIN:-$root/build/bin}"
target="${TARGET:-0.94}"
runs="${RUNS:-3}"
python="${PYTHON:-python3}"
specs=("$@")
[ ${#specs[@]} -gt 0 ] || specs=(examples/fashion-mnist-fast.yaml)
fmnist="${FMNIST_DIR:-}"
[ -z "$fmnist" ] && [ -d .gpu-data/fashion-mnist ] && fmnist="$root/.gpu-data/fashion-mnist"
[ -n "$fmnist" ] && fmnist="$(cd "$fmnist" && pwd)"

for tool in stoke stoke-coordinator stoke-worker; do
  [ -x "$bin/$tool" ] || { echo "no $bin/$tool: build first (scripts/build.sh)" >&2; exit 1; }
done

data_dir=$(mktemp -d /tmp/stoke-tta.XXXXXX)
port=$((20000 + RANDOM % 20000))
export STOKE_ADDRESS="127.0.0.1:$port"
roots=()
[ -n "$fmnist" ] && roots=(--data-root "$(dirname "$fmnist")")
coordinator_pid=""
cleanup() {
  [ -n "$coordinator_pid" ] && kill "$coordinator_pid" 2>/dev/null && wait "$coordinator_pid"
  "$bin/stoke-coordinator" --stop-workers --data-dir "$data_dir" > /dev/null 2>&1
}
trap cleanup EXIT

# One local worker: on a GPU host the first GPU, else the CPU.
"$bin/stoke-coordinator" --address "$STOKE_ADDRESS" --data-dir "$data_dir" \
  --metrics-address 127.0.0.1:0 --local-workers 1 "${roots[@]}" \
  > "$out/tta-coordinator.log" 2>&1 &
coordinator_pid=$!
for _ in $(seq 1 120); do
  "$bin/stoke" cluster 2>/dev/null | grep -q IDLE && break
  sleep 0.5
done
"$bin/stoke" cluster | tee "$out/tta-cluster.txt" | grep -q IDLE ||
  { echo "no idle worker came up; see $out/tta-coordinator.log" >&2; exit 1; }

summary=()
for spec in "${specs[@]}"; do
  name=$(basename "$spec" .yaml)
  job_file="$spec"
  if [ -n "$fmnist" ]; then  # the spec's Fashion-MNIST path, pointed at FMNIST_DIR
    job_file="$data_dir/$name.yaml"
    sed -E "s#[^ {},:]*fashion-mnist[^ {},]*#$fmnist#" "$spec" > "$job_file"
  fi
  for run in $(seq 1 "$runs"); do
    events="$out/tta-$name-$run.jsonl"
    id=$("$bin/stoke" submit "$job_file" 2>> "$out/tta-submit.log") || { echo "submit of $spec failed" >&2; exit 1; }
    timeout "${JOB_TIMEOUT:-300}" "$bin/stoke" -o json watch "$id" > "$events" 2>&1
    result=$("$python" bench/python/seconds_to_accuracy.py "$events" "$target")
    read -r secs step best state <<< "$result"
    started=$("$bin/stoke" status "$id" 2>/dev/null | grep -o 'started in [^(]*' | head -1)
    echo "$name run $run (job $id): ${secs} s to ${target} at step ${step}; best ${best}%;" \
      "${state}${started:+; $started}"
    summary+=("$name stoke $secs")
  done
  [ "${SKIP_PYTHON:-0}" = 1 ] && continue
  [ -n "$fmnist" ] || { echo "python side needs FMNIST_DIR" >&2; continue; }
  for mode in ${PY_MODES:-eager compile cuda-graph compile-cuda-graph}; do
    for run in $(seq 1 "${PY_RUNS:-$runs}"); do
      log="$out/tta-$name-python-$mode-$run.log"
      "$python" bench/python/time_to_accuracy.py --spec "$spec" --data-dir "$fmnist" \
        --mode "$mode" --target "$target" > "$log" 2>&1
      line=$(tail -1 "$log")
      echo "$name python $mode run $run: $line"
      summary+=("$name python-$mode $(awk '{print $1}' <<< "$line")")
    done
  done
done

echo
echo "== median seconds from submit (Stoke) or process start (Python) to ${target}"
printf '%s\n' "${summary[@]}" | "$python" -c '
import sys, statistics, collections
runs = collections.defaultdict(list)
for line in sys.stdin:
    name, side, secs = line.split()
    runs[(name, side)].append(secs)
for (name, side), values in runs.items():
    got = sorted(float(v) for v in values if v.replace(".", "", 1).isdigit())
    med = f"{statistics.median(got):.2f} s" if len(got) == len(values) else "not reached in every run"
    print(f"{name:32s} {side:24s} {med}  (runs: " + " ".join(values) + ")")
'
