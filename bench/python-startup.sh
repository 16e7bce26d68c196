#!/usr/bin/env bash
# Start-up of a Python model as a user meets it: a coordinator with its local worker on the
# GPU, and one job file submitted twice through the CLI (the second time the worker, the
# training process's libraries and torch.compile's cache are warm). For each job: submit ->
# first training step, and apart from it the training process's start and torch.compile.
# From the repo root on the GPU machine, after a build into build-gpu:
#   source .gpu-deps/setup.sh && bench/python-startup.sh
# Environment: STOKE_BIN (default build-gpu/bin), SPEC (default bench/specs/py-vit.yaml),
# RUNS (default 2), OUT (default bench-out).
set -uo pipefail
bin="${STOKE_BIN:-build-gpu/bin}"
spec="${SPEC:-bench/specs/py-vit.yaml}"
out="${OUT:-$PWD/bench-out}"
mkdir -p "$out"
data=$(mktemp -d)
"$bin/stoke-coordinator" --data-dir "$data" --address 127.0.0.1:0 --stop-workers-on-exit \
  > "$out/startup-coordinator.log" 2>&1 &
coordinator=$!
trap 'kill $coordinator 2>/dev/null; wait $coordinator 2>/dev/null; rm -rf "$data"' EXIT
for _ in $(seq 1 600); do
  [ -s "$data/coordinator.address" ] && break
  sleep 0.1
done
address=$(cat "$data/coordinator.address")
stoke=("$bin/stoke" --address "$address")
# The worker is warm once it has attached (it warms its device before it does).
for _ in $(seq 1 600); do
  "${stoke[@]}" cluster 2>/dev/null | grep -q idle && break
  sleep 0.2
done
for run in $(seq 1 "${RUNS:-2}"); do
  id=$("${stoke[@]}" submit "$spec" 2>/dev/null | head -1)
  "${stoke[@]}" watch "$id" > "$out/startup-watch-$run.log" 2>&1
  "${stoke[@]}" -o json status "$id" | python3 -c '
import json, sys
job = json.load(sys.stdin)
startup = job.get("startup", {})
worker = startup.get("worker", {})
total = startup.get("seconds", 0.0)
compiling = worker.get("compile_seconds", 0.0)
parts = ", ".join("%s %.2f s" % (name, worker.get(key, 0.0)) for name, key in (
    ("training process", "process_seconds"), ("data", "data_seconds"),
    ("model", "model_seconds"), ("first step", "first_step_seconds")))
print("run %s: %s; submit -> first step %.2f s, of which torch.compile %.2f s; without "
      "compile %.2f s (%s)" % (sys.argv[1], job["state"], total, compiling, total - compiling,
                               parts))
' "$run" | tee -a "$out/startup.md"
done
