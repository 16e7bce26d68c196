#!/usr/bin/env bash
# Compiles the worker's CUDA paths in C++ (the code under `#if STOKE_WITH_CUDA`,
# `STOKE_WITH_CUDA_KERNELS` and `STOKE_WITH_NCCL`) as a CUDA build of the worker sees it,
# on a machine whose LibTorch is CPU-only, to assembly that is thrown away (-S at -O0;
# -fsyntax-only would skip the flow warnings, such as a function falling off its end),
# against this machine's LibTorch headers (which include ATen's and c10's CUDA headers) and the
# CUDA toolkit's, with the warning flags of the build. It catches what a CPU build never
# compiles (a renamed member, a missing include in a CUDA branch) before a GPU host does;
# differences between this LibTorch's API and a GPU host's newer one still need the GPU
# machine (scripts/gpu-check.sh).
#   scripts/check-cuda-host.sh [FILE.cc ...]   # default: every worker file with such code
# Exit status: 0 clean; 1 an error or warning (printed); 77 no CUDA toolkit or LibTorch
# headers here (skipped).
set -euo pipefail
cd "$(dirname "$0")/.."

cuda_home="${CUDA_HOME:-/usr/local/cuda}"
torch_include="${STOKE_TORCH_INCLUDE:-/usr/include}"
if [[ ! -f "$cuda_home/include/cuda_runtime_api.h" ]]; then
  echo "check-cuda-host: SKIPPED: no CUDA toolkit headers in $cuda_home/include"
  exit 77
fi
if [[ ! -f "$torch_include/c10/cuda/CUDAStream.h" ]]; then
  echo "check-cuda-host: SKIPPED: no LibTorch CUDA headers in $torch_include (libtorch-dev)"
  exit 77
fi

if [[ $# -gt 0 ]]; then
  sources=("$@")
else
  # Files with a CUDA branch, and every file of the ops layer (whose headers have them).
  mapfile -t sources < <({
    grep -rlE 'STOKE_WITH_(CUDA|NCCL)' worker --include='*.cc'
    find worker/ops -maxdepth 1 -name '*.cc'
  } | sort -u)
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
# Debian's libtorch-dev ships c10/cuda but not the header its CMake build generates for
# it (it only says whether c10_cuda is a shared library).
mkdir -p "$work/shim/c10/cuda/impl"
printf '#pragma once\n#define C10_CUDA_BUILD_SHARED_LIBS\n' \
  > "$work/shim/c10/cuda/impl/cuda_cmake_macros.h"

flags=(-std=gnu++17 -S -o /dev/null -O0 -Wall -Wextra -Werror -Wno-maybe-uninitialized
  -D_GLIBCXX_USE_CXX11_ABI=1 -DSTOKE_WITH_CUDA=1 -DSTOKE_WITH_CUDA_KERNELS=1
  -DSTOKE_WITH_NCCL=1 -DSTOKE_WITH_GLOO=0 -DUSE_DISTRIBUTED
  -I. -isystem "$work/shim" -isystem "$torch_include/torch/csrc/api/include"
  -isystem "$cuda_home/include")
# The communicator's NCCL branch needs nccl.h (the CUDA toolkit here may carry it) and
# c10d's NCCL headers; without either it is left out.
if [[ ! -f "$cuda_home/include/nccl.h" && ! -f /usr/include/nccl.h ]] ||
  [[ ! -f "$torch_include/torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp" ]]; then
  flags=("${flags[@]/-DSTOKE_WITH_NCCL=1/-DSTOKE_WITH_NCCL=0}")
else
  flags+=(-DUSE_C10D_NCCL)
fi

# check FILE: prints ok, or the file's errors and fails.
check() {
  local cc="$1" log
  log="$work/$(echo "$cc" | tr / _).log"
  if "$CXX" "${flags[@]}" "$cc" > "$log" 2>&1; then
    echo "check-cuda-host: ok      $cc"
  else
    echo "check-cuda-host: FAILED  $cc"
    grep -E 'error|warning' "$log" | head -n 20
    return 1
  fi
}
export -f check
export work CXX="${CXX:-c++}"
export flags_text="${flags[*]}"
# At most CHECK_JOBS at once (default: the cores): each holds LibTorch's headers (~1 GiB).
printf '%s\n' "${sources[@]}" |
  xargs -P "${CHECK_JOBS:-$(nproc)}" -I{} bash -c 'read -ra flags <<< "$flags_text"; check "$1"' _ {} ||
  exit 1
