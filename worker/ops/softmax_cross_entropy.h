// Mean cross-entropy of low-precision (bf16/fp16) logits [N, C] against class indices [N],
// with fp32 arithmetic throughout but fewer passes over the logits than ATen's
// cross_entropy of the logits cast to fp32. For GPT-2's 16 x 1024 x 50,304 logits that
// composition is a cast, log-softmax, NLL and their backward, tens of GB of memory
// traffic a step (BENCHMARKS.md); here forward writes fp32 probabilities (from an fp32
// copy of the logits that is freed at once; fp16 on CUDA needs none), and backward writes
// the gradient from them in one pass instead of four, with the target entries computed in
// fp32 apart, so the gradient is as precise as fp32 arithmetic rounded once to the
// logits' dtype. On GPUs of a build with nvcc (STOKE_WITH_CUDA_KERNELS) the loss runs in
// Stoke's own two kernels instead (worker/ops/cuda/cross_entropy_kernels.h): one read
// of the logits forward, one read and one write backward, nothing fp32 of their size.
// Every target must be a class index (no ignore index), which holds for all of Stoke's
// data sources.
#pragma once

#include <torch/types.h>

namespace stoke::worker {

torch::Tensor SoftmaxCrossEntropy(const torch::Tensor& logits, const torch::Tensor& targets);

}  // namespace stoke::worker
