#!/usr/bin/env bash
# Checks the worker's layering (docs/architecture.md, Development): each folder of worker/
# includes only from the layers below it, the training layers never include generated
# protobuf headers, and worker/link never includes a torch header.
#   common <- runtime <- ops <- models <- data, dist <- engine <- link / main
#   models <- python (the embedded CPython; only the trainer's main above it)
# (telemetry and link are torch-free; formats/ and spec/ are below everything.)
# Exit status: 0 clean, 1 with each offending line printed.
set -euo pipefail
cd "$(dirname "$0")/.."

declare -A allowed=(
  [common]="common"
  [runtime]="common runtime"
  [ops]="common runtime ops"
  [models]="common runtime ops models"
  [data]="common runtime ops models data"
  [dist]="common runtime ops models dist"
  [engine]="common runtime ops models data dist engine"
  [python]="common runtime ops models python"
  [telemetry]="common telemetry"
  [link]="common telemetry link"
)
torch_layers="common runtime ops models data dist engine python telemetry"

failed=0
for layer in "${!allowed[@]}"; do
  [[ -d "worker/$layer" ]] || continue
  while IFS= read -r hit; do
    file="${hit%%:*}"
    included="$(sed -E 's/.*#include "worker\/([a-z_]+)\/.*/\1/' <<<"$hit")"
    if [[ " ${allowed[$layer]} " != *" $included "* ]]; then
      echo "check-layers: worker/$layer may not include worker/$included: $hit"
      failed=1
    fi
  done < <(grep -rnE '^\s*#\s*include "worker/' "worker/$layer" || true)
  if [[ " $torch_layers " == *" $layer "* ]]; then
    if grep -rnE '^\s*#\s*include ".*\.pb\.h"' "worker/$layer"; then
      echo "check-layers: worker/$layer includes generated protobuf headers (above)"
      failed=1
    fi
  fi
done
if grep -rnE '^\s*#\s*include [<"](torch|ATen|c10)/' worker/link worker/telemetry; then
  echo "check-layers: worker/link and worker/telemetry must not include torch (above)"
  failed=1
fi
# The embedded Python is one layer's: nothing else includes Python's or libtorch_python's
# headers.
if grep -rnE '^\s*#\s*include [<"](Python\.h|torch/csrc/(python_headers|autograd/python_)|pybind11/)' \
  --include='*.h' --include='*.cc' bench client formats security server spec tests worker |
  grep -v '^worker/python/'; then
  echo "check-layers: only worker/python may include Python's headers (above)"
  failed=1
fi
[[ $failed -eq 0 ]] && echo "check-layers: the worker's layers include only downward"
exit "$failed"
