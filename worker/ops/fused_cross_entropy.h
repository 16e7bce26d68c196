// Tensor-level entry to Stoke's own softmax cross-entropy kernels
// (worker/ops/cuda/cross_entropy_kernels.h), shared by the plain loss
// (softmax_cross_entropy.h) and the chunked output layer (chunked_cross_entropy.h). They
// exist only in builds with nvcc (STOKE_WITH_CUDA_KERNELS); FusedCrossEntropyApplies says
// whether a tensor can take them, and callers keep their ATen path for the rest.
#pragma once

#include <torch/types.h>

namespace stoke::worker {

// True for bf16/fp16 logits on a CUDA device in a build that has the kernels.
bool FusedCrossEntropyApplies(const torch::Tensor& logits);

// Per row of logits [N, C] (contiguous) and targets [N] (int64): writes the loss
// (log-sum-exp minus the target's logit) and the log-sum-exp into row_loss and row_lse,
// contiguous fp32 [N] (slices of larger tensors are fine).
void FusedCrossEntropyRows(const torch::Tensor& logits, const torch::Tensor& targets,
                           torch::Tensor& row_loss, torch::Tensor& row_lse);

// (softmax - one_hot) * grad_loss * scale in the logits' dtype, from the row_lse of
// FusedCrossEntropyRows; grad_loss is an fp32 device scalar (no host read).
torch::Tensor FusedCrossEntropyGrad(const torch::Tensor& logits, const torch::Tensor& targets,
                                    const torch::Tensor& row_lse, const torch::Tensor& grad_loss,
                                    double scale);

// The same, written into `grad` (contiguous, the logits' shape and type), which may be the
// logits themselves: each element is read, then overwritten, by the same thread, and no
// other element is read.
void FusedCrossEntropyGradInto(const torch::Tensor& logits, const torch::Tensor& targets,
                               const torch::Tensor& row_lse, const torch::Tensor& grad_loss,
                               double scale, torch::Tensor& grad);

}  // namespace stoke::worker
