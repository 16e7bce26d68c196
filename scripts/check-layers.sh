#!/usr/bin/env bash
# Checks the layering (docs/architecture.md, Development), at two scales.
# Top-level folders include only from the folders below them:
#   files <- formats <- spec <- server, client, worker <- bench, tests
#   (security and proto sit beside files, below spec; "stoke/..." headers are proto's,
#   generated)
# and every top-level folder is placed in that order, or marked as holding no C++.
# Within worker/, each folder includes only from the layers below it, the training layers
# never include generated protobuf headers, and worker/link never includes a torch header:
#   common <- runtime <- ops <- models <- data, dist <- engine <- link / main
#   models <- python (the embedded CPython; only the trainer's main above it)
#   common <- sandbox (stoke-sandbox, torch-free; the link layer starts it) <- link
# Only the worker (and the bench and tests above it) may include torch.
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
  [sandbox]="common sandbox"
  [link]="common telemetry sandbox link"
)
torch_layers="common runtime ops models data dist engine python telemetry"

failed=0

# What each top-level folder may include besides itself, absl and the C++ library; "-"
# marks a folder that holds no C++ at all.
declare -A top_allowed=(
  [files]=""
  [proto]=""
  [security]=""
  [formats]="files"
  [spec]="files formats proto stoke"
  [server]="files formats spec security proto stoke"
  [client]="files formats spec security proto stoke"
  [worker]="files formats spec security proto stoke"
  [bench]="files formats spec security proto stoke client worker"
  [tests]="*"
  [.ci]="-" [cmake]="-" [dashboards]="-" [deploy]="-" [docs]="-" [examples]="-" [scripts]="-"
)
torch_free_folders="files proto security formats spec server client"
# The folders git tracks (a build or output folder is none of the project's); every one
# where there is no git.
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  mapfile -t folders < <(git ls-files | grep / | cut -d/ -f1 | sort -u)
else
  # A folder holding a CMakeCache.txt is a build tree, not the project's.
  mapfile -t folders < <(find . -mindepth 1 -maxdepth 1 -type d -not -name '.*' \
    -not -exec test -e '{}/CMakeCache.txt' \; -printf '%f\n')
fi
for folder in "${folders[@]}"; do
  if [[ -z "${top_allowed[$folder]+set}" ]]; then
    echo "check-layers: top-level folder $folder/ has no place in scripts/check-layers.sh"
    failed=1
    continue
  fi
  allowed_here="${top_allowed[$folder]}"
  sources="$(find "$folder" \( -name '*.h' -o -name '*.cc' -o -name '*.cpp' -o -name '*.cu' \) \
    -not -path '*/node_modules/*' -print -quit)"
  if [[ "$allowed_here" == "-" ]]; then
    if [[ -n "$sources" ]]; then
      echo "check-layers: $folder/ is marked as holding no C++, but holds $sources"
      failed=1
    fi
    continue
  fi
  [[ "$allowed_here" == "*" ]] && continue
  while IFS= read -r hit; do
    included="$(sed -E 's/^[^:]*:[0-9]+:\s*#\s*include "([a-z_0-9]+)\/.*/\1/' <<<"$hit")"
    [[ "$included" == "$folder" || "$included" == absl ]] && continue
    if [[ " $allowed_here " != *" $included "* ]]; then
      echo "check-layers: $folder/ may not include $included/: $hit"
      failed=1
    fi
  done < <(grep -rnE '^\s*#\s*include "[a-z_0-9]+/' "$folder" \
    --include='*.h' --include='*.cc' --include='*.cpp' --include='*.cu' || true)
done
for folder in $torch_free_folders; do
  if grep -rnE '^\s*#\s*include [<"](torch|ATen|c10)/' "$folder" --include='*.h' --include='*.cc'; then
    echo "check-layers: $folder/ must not include torch (above)"
    failed=1
  fi
done

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
if grep -rnE '^\s*#\s*include [<"](torch|ATen|c10)/' worker/link worker/telemetry worker/sandbox; then
  echo "check-layers: worker/link, worker/telemetry and worker/sandbox must not include torch (above)"
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
[[ $failed -eq 0 ]] && echo "check-layers: every folder, and each of the worker's layers, includes only downward"
exit "$failed"
