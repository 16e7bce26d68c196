// Layer norm of an fp32 residual stream straight into the bf16/fp16 input of the next
// matrix product, through Stoke's kernels (worker/ops/cuda/layer_norm_kernels.h):
// forward writes the low-precision output, backward takes the low-precision gradient, so
// autocast's two casts around ATen's fp32 layer norm disappear. Only in builds with nvcc
// (STOKE_WITH_CUDA_KERNELS); FusedLayerNormApplies says when it can be used.
#pragma once

#include <torch/types.h>

#include <utility>

namespace stoke::worker {

// True for an fp32 tensor on a CUDA device in a build that has the kernels.
bool FusedLayerNormApplies(const torch::Tensor& x);

// layer_norm(x, [width], weight, bias, eps) in fp32 arithmetic, returned in out_dtype
// (bf16 or fp16); differentiable in x, weight and bias (fp32 gradients).
torch::Tensor FusedLayerNorm(const torch::Tensor& x, const torch::Tensor& weight,
                             const torch::Tensor& bias, double eps, at::ScalarType out_dtype);

// A residual connection and the norm after it in one pass: returns (x + branch, the
// layer norm of that in out_dtype). x fp32 as above, branch of x's sizes (bf16/fp16: the
// output of the branch's last matrix product). Differentiable in all four; the branch's
// gradient comes in its own type, written by the same kernel as the stream's.
std::pair<torch::Tensor, torch::Tensor> FusedAddLayerNorm(const torch::Tensor& x,
                                                          const torch::Tensor& branch,
                                                          const torch::Tensor& weight,
                                                          const torch::Tensor& bias, double eps,
                                                          at::ScalarType out_dtype);

}  // namespace stoke::worker
