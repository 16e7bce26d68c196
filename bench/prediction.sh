#!/usr/bin/env bash
# How far off start-time predictions are (BENCHMARKS.md, "Start-time predictions"): starts
# a real stoke-coordinator from build/bin (it builds nothing) on a loopback port with no
# local workers and a job store in a temp folder, then runs stoke-prediction-error against
# it: simulated workers, jobs of known lengths arriving at seeded random times, each job's
# predicted start (read right after its submission) against its real start. Prints the
# Markdown table row. Arguments go to stoke-prediction-error (--workers, --jobs, --load,
# --seconds-per-step, --seed); STOKE_BIN_DIR (default build/bin).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${STOKE_BIN_DIR:-$root/build/bin}
for tool in stoke-coordinator stoke-prediction-error; do
  [ -x "$bin/$tool" ] || { echo "bench/prediction.sh: $bin/$tool not found; build it first" >&2; exit 2; }
done
tmp=$(mktemp -d "${TMPDIR:-/tmp}/stoke-prediction-XXXXXX")
coordinator_pid=""
cleanup() {
  [ -n "$coordinator_pid" ] && kill "$coordinator_pid" 2> /dev/null && wait "$coordinator_pid" || true
  rm -rf "$tmp"
}
trap cleanup EXIT
"$bin/stoke-coordinator" --address 127.0.0.1:0 --metrics-address "" --local-workers 0 \
  --data-dir "$tmp" --log-level warn > "$tmp/coordinator.log" 2>&1 &
coordinator_pid=$!
for _ in $(seq 1 100); do
  [ -s "$tmp/coordinator.address" ] && break
  sleep 0.1
done
[ -s "$tmp/coordinator.address" ] || { echo "coordinator did not start" >&2; cat "$tmp/coordinator.log" >&2; exit 1; }
echo "| cluster | median wait | p90 wait | median error | p90 error | median error / median wait | median of each error / its wait | jobs without a prediction |"
echo "|---|---|---|---|---|---|---|---|"
"$bin/stoke-prediction-error" --coordinator "$(cat "$tmp/coordinator.address")" "$@"
