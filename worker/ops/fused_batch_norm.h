// Batch norm followed by what a residual network puts after it (the residual add and the
// ReLU), as one operation. In training mode on a CUDA bf16/fp16 activation in
// channels-last layout, in builds with Stoke's kernels (STOKE_WITH_CUDA_KERNELS), it is
// one autograd function over worker/ops/cuda/batch_norm_kernels.h: two passes over
// the activation forward and two backward, where ATen makes one per operation. Elsewhere
// (CPU, fp32, eval mode, channels not a multiple of 8) it is the module, the add and the
// ReLU, as before.
#pragma once

#include <torch/nn/modules/batchnorm.h>
#include <torch/types.h>

namespace stoke::worker {

// relu?(norm(x) + residual?); residual of x's sizes, or undefined for none. Updates the
// module's running statistics and batch count as its forward does.
torch::Tensor BatchNormAct(torch::nn::BatchNorm2dImpl& norm, const torch::Tensor& x,
                           const torch::Tensor& residual, bool relu);

// Whether BatchNormAct would take Stoke's kernels for these arguments now (for tests).
bool BatchNormActUsesOwnKernels(const torch::nn::BatchNorm2dImpl& norm, const torch::Tensor& x,
                                const torch::Tensor& residual);

}  // namespace stoke::worker
