#!/usr/bin/env bash
# Compiles every CUDA file of the worker (worker/**/*.cu) with nvcc for the GPUs Stoke
# targets (sm_80 and sm_90), to objects only and without torch: the kernels' headers are
# torch-free, so this needs nothing but the CUDA toolkit. Every warning, nvcc's or the
# host compiler's, is an error.
# Exit status: 0 all compiled cleanly; 1 a warning or error; 77 no nvcc here (skipped).
set -euo pipefail
cd "$(dirname "$0")/.."

nvcc="${NVCC:-$(command -v nvcc || true)}"
if [[ -z "$nvcc" && -x /usr/local/cuda/bin/nvcc ]]; then
  nvcc=/usr/local/cuda/bin/nvcc
fi
if [[ -z "$nvcc" ]]; then
  echo "check-cuda: SKIPPED: no nvcc in PATH or /usr/local/cuda/bin"
  exit 77
fi

out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
mapfile -t sources < <(find worker -name '*.cu' | sort)
if [[ ${#sources[@]} -eq 0 ]]; then
  echo "check-cuda: no .cu files found under worker/" >&2
  exit 1
fi

echo "check-cuda: $("$nvcc" --version | tail -1)"
failed=0
for cu in "${sources[@]}"; do
  log="$out/$(basename "$cu").log"
  if "$nvcc" -std=c++17 -I. \
      -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 \
      -Werror all-warnings -Xcompiler -Wall,-Wextra,-Werror \
      -c "$cu" -o "$out/$(basename "$cu").o" >"$log" 2>&1 &&
    ! grep -qi 'warning' "$log"; then
    echo "check-cuda: ok      $cu"
  else
    echo "check-cuda: FAILED  $cu"
    cat "$log"
    failed=1
  fi
done
exit "$failed"
