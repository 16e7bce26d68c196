// Max pooling over square windows, through Stoke's kernels (worker/ops/cuda/
// max_pool_kernels.h) for a CUDA bf16/fp16 activation in channels-last layout with a
// multiple of 8 channels, in builds with nvcc (STOKE_WITH_CUDA_KERNELS); elsewhere
// torch::max_pool2d. Same values and gradients as torch's either way.
#pragma once

#include <torch/types.h>

#include <cstdint>

namespace stoke::worker {

// torch::max_pool2d(x, kernel, stride, padding) with no dilation and floor rounding.
torch::Tensor MaxPool2d(const torch::Tensor& x, int64_t kernel, int64_t stride, int64_t padding);

// Whether MaxPool2d would take Stoke's kernels for x (for tests).
bool MaxPoolUsesOwnKernels(const torch::Tensor& x, int64_t kernel, int64_t padding);

}  // namespace stoke::worker
