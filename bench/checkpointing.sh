#!/usr/bin/env bash
# What activation checkpointing saves and costs on GPT-2 small (the issue's bar: peak memory
# down >= 40%, throughput down <= 35%): stoke-bench on bench/specs/gpt2-small.yaml with
# training.activation_checkpointing off and on, with the step eager and captured as a CUDA
# graph, each timed as bench/speed.sh times it. Writes $OUT/checkpointing.md. From the repo
# root on the GPU machine:
#   source .gpu-deps/setup.sh && bench/checkpointing.sh
# Environment: STOKE_BENCH, BATCH (default the spec's 16).
set -uo pipefail
out="${OUT:-$PWD/bench-out}"
mkdir -p "$out"
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/cases.sh"
ensure_stoke_bench
setup_case gpt2-small
batch_set=()
[ -n "${BATCH:-}" ] && batch_set=(--set "training.batch_size=$BATCH")
: > "$out/checkpointing.jsonl"
for graph in off on; do
  for checkpointing in off on; do
    "$bench" "$spec" ${batch_set[@]+"${batch_set[@]}"} --set "training.cuda_graph=$graph" \
      --set "training.activation_checkpointing=$checkpointing" \
      > "$out/checkpointing-graph-$graph-$checkpointing.log" 2>&1
    tail -1 "$out/checkpointing-graph-$graph-$checkpointing.log" |
      python3 -c 'import json, sys; r = json.loads(sys.stdin.read()); r["graph"], r["checkpointing"] = sys.argv[1:3]; print(json.dumps(r))' \
        "$graph" "$checkpointing" >> "$out/checkpointing.jsonl" ||
      echo "graph $graph, checkpointing $checkpointing: no result (see its log)" >&2
  done
done
python3 - "$out/checkpointing.jsonl" <<'PY' | tee "$out/checkpointing.md"
import json, sys
runs = {(r["graph"], r["checkpointing"]): r for r in map(json.loads, open(sys.argv[1]))}
print("| CUDA graph | checkpointing | samples/s | peak memory GiB | memory vs off | throughput vs off |")
print("|---|---|---|---|---|---|")
for (graph, ckpt), r in sorted(runs.items()):
    base = runs.get((graph, "off"))
    mem = rate = "—"
    if base and ckpt == "on":
        mem = f"{100 * (r['peak_memory_bytes'] / base['peak_memory_bytes'] - 1):+.1f}%"
        rate = f"{100 * (r['samples_per_second'] / base['samples_per_second'] - 1):+.1f}%"
    print(f"| {graph} | {ckpt} | {r['samples_per_second']:,.0f} | "
          f"{r['peak_memory_bytes'] / 2**30:.2f} | {mem} | {rate} |")
PY
