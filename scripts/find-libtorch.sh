#!/usr/bin/env bash
# Finds the LibTorch to build stoke-worker against and prints one line:
#   cuda PREFIX     a CUDA LibTorch; PREFIX goes into CMAKE_PREFIX_PATH
#   cpu PREFIX      a CPU-only LibTorch named by $STOKE_LIBTORCH
#   debian          none found: Debian's libtorch-dev (CPU only), found by CMake itself
# With --cmake-args it prints instead the CMake arguments for that choice, one a line:
# -DCMAKE_PREFIX_PATH=PREFIX, and for a CUDA LibTorch -DCMAKE_CUDA_COMPILER=NVCC when the
# CUDA toolkit's nvcc is found (on PATH, in $CUDA_HOME or /usr/local/cuda), which builds
# Stoke's own CUDA kernels.
# Where it looks, first match wins:
#   1. $STOKE_LIBTORCH: a LibTorch folder (an unpacked libtorch zip), a torch package
#      folder (.../site-packages/torch), or any folder holding Torch/TorchConfig.cmake;
#   2. the torch package that `python3` imports (the pip wheel ships LibTorch);
#   3. an unpacked libtorch zip in /opt/libtorch, /usr/local/libtorch, ~/libtorch.
# Only a CUDA build is taken from 2 and 3: a CPU wheel or zip brings nothing Debian's
# package does not, and Debian's is the one the CPU build is tested with.
# Prints nothing else; exits non-zero only when $STOKE_LIBTORCH names no LibTorch.
set -euo pipefail
mode="${1:-}"

# The folder CMake should search for the given candidate, or nothing.
cmake_prefix_of() {
  local dir="$1"
  if [ -f "$dir/share/cmake/Torch/TorchConfig.cmake" ]; then
    echo "$dir"  # a libtorch zip, or the torch package folder of a wheel
  elif [ -f "$dir/Torch/TorchConfig.cmake" ]; then
    echo "$dir"  # torch.utils.cmake_prefix_path itself
  fi
}

# The folder that holds lib/libtorch*.so for a CMake prefix found above.
library_root_of() {
  local prefix="$1"
  if [ -f "$prefix/Torch/TorchConfig.cmake" ]; then
    (cd "$prefix/../.." && pwd)
  else
    echo "$prefix"
  fi
}

is_cuda_build() {
  local root
  root=$(library_root_of "$1")
  compgen -G "$root/lib/libtorch_cuda*.so*" > /dev/null
}

find_nvcc() {
  local nvcc
  for nvcc in "$(command -v nvcc || true)" "${CUDA_HOME:-/nonexistent}/bin/nvcc" \
    "${CUDA_PATH:-/nonexistent}/bin/nvcc" /usr/local/cuda/bin/nvcc; do
    [ -n "$nvcc" ] && [ -x "$nvcc" ] && { echo "$nvcc"; return 0; }
  done
  return 1
}

report() {
  local kind="$1" prefix="$2"
  if [ "$mode" != --cmake-args ]; then
    echo "$kind $prefix"
    return
  fi
  echo "-DCMAKE_PREFIX_PATH=$prefix"
  if [ "$kind" = cuda ] && nvcc=$(find_nvcc); then
    echo "-DCMAKE_CUDA_COMPILER=$nvcc"
  fi
}

report_prefix() {
  if is_cuda_build "$1"; then report cuda "$1"; else report cpu "$1"; fi
}

if [ -n "${STOKE_LIBTORCH:-}" ]; then
  prefix=$(cmake_prefix_of "$STOKE_LIBTORCH")
  if [ -z "$prefix" ]; then
    echo "STOKE_LIBTORCH=$STOKE_LIBTORCH: no LibTorch there (expected" \
      "share/cmake/Torch/TorchConfig.cmake or Torch/TorchConfig.cmake under it)" >&2
    exit 1
  fi
  report_prefix "$prefix"
  exit 0
fi

candidates=()
if command -v python3 > /dev/null; then
  # A broken torch install must not break the CPU build: any failure means "no wheel".
  wheel=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)' 2> /dev/null || true)
  [ -n "$wheel" ] && candidates+=("$wheel")
fi
candidates+=(/opt/libtorch /usr/local/libtorch "${HOME:-/root}/libtorch")

for dir in "${candidates[@]}"; do
  prefix=$(cmake_prefix_of "$dir")
  if [ -n "$prefix" ] && is_cuda_build "$prefix"; then
    report cuda "$prefix"
    exit 0
  fi
done
# Debian's LibTorch is in CMake's default search path: no arguments needed.
[ "$mode" = --cmake-args ] || echo debian
