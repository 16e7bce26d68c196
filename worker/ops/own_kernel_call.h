// What each torch-side wrapper of Stoke's CUDA kernels (worker/ops/cuda/) needs: the
// kernels' name for a tensor's 16-bit type, the current stream to launch on, and the
// launch's error turned into an exception naming the kernel. Only in builds with nvcc
// (STOKE_WITH_CUDA_KERNELS), where c10's CUDA headers exist.
#pragma once

#include <c10/cuda/CUDAStream.h>
#include <torch/types.h>

#include "worker/ops/cuda/half_type.h"

namespace stoke::worker {

// bf16 or fp16, else an error that names `who` and the type it was given.
inline cuda::HalfType HalfTypeOf(at::ScalarType type, const char* who) {
  TORCH_CHECK(type == torch::kBFloat16 || type == torch::kHalf, who,
              ": Stoke's kernels take bf16 or fp16, not ", type);
  return type == torch::kBFloat16 ? cuda::HalfType::kBFloat16 : cuda::HalfType::kFloat16;
}

// The stream the caller's work on t's device is ordered on (captured into CUDA graphs).
inline void* CurrentStreamOf(const torch::Tensor& t) {
  return c10::cuda::getCurrentCUDAStream(t.get_device()).stream();
}

// `error` as the kernels return it: nullptr, or CUDA's text.
inline void CheckKernel(const char* error, const char* kernel) {
  TORCH_CHECK(error == nullptr, kernel, " CUDA kernel failed: ", error);
}

}  // namespace stoke::worker
