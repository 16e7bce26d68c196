#!/usr/bin/env bash
# Stoke's several-GPU step under different settings, one bench/ddp-scaling.sh run (Stoke
# only) per variant, to see which setting moves scaling efficiency; with TRACE_COUNTS, a
# Kineto trace of rank 0 at those GPU counts (STOKE_TRACE_DIR) summarised by
# bench/python/trace_summary.py. From the repo root on the GPU machine, after a build:
#   source .gpu-deps/setup.sh && VARIANTS="base ctas8:NCCL_MAX_CTAS=8 big:BUCKET_MB=100" \
#     MODELS=gpt2-small bench/ddp-variants.sh
# A variant is name[:VAR=value[,VAR=value...]]; the variables reach ddp-scaling.sh and,
# through the coordinator, its workers (NCCL_* among them). Results: $OUT/variants.md.
set -uo pipefail
out="${OUT:-$PWD/bench-out}"
mkdir -p "$out"
here="$(cd "$(dirname "$0")" && pwd)"
for variant in ${VARIANTS:-base}; do
  name=${variant%%:*}
  settings=()
  [ "$name" != "$variant" ] && IFS=',' read -r -a settings <<< "${variant#*:}"
  echo "## $name ${settings[*]:-}" | tee -a "$out/variants.md"
  env "${settings[@]}" OUT="$out/$name" SKIP_PYTHON=1 SIDE_BY_SIDE=none "$here/ddp-scaling.sh" \
    > "$out/$name.log" 2>&1
  tail -n +3 "$out/$name/ddp-scaling.md" >> "$out/variants.md"
done
trace_steps="${TRACE_STEPS:-60,5}"
if [ -n "${TRACE_COUNTS:-}" ]; then
  traces="$out/traces"
  mkdir -p "$traces"
  STOKE_TRACE_DIR="$traces" STOKE_TRACE_STEPS="$trace_steps" GPU_COUNTS="$TRACE_COUNTS" \
    OUT="$out/traced" SKIP_PYTHON=1 SIDE_BY_SIDE=none "$here/ddp-scaling.sh" > "$out/traced.log" 2>&1
  labels=()
  for f in "$traces"/trace-*-rank0.json; do labels+=("$(basename "$f" .json)=$f"); done
  python3 "$here/python/trace_summary.py" --steps "${trace_steps#*,}" --top "${TOP:-30}" \
    "${labels[@]}" > "$out/trace-summary.md" 2>&1
  gzip "$traces"/*.json
fi
cat "$out/variants.md"
