// A language model's output layer and its cross-entropy in one autograd node, for when
// the [tokens, vocabulary] logits fit whole: forward multiplies once, in the autocast
// type, and keeps per row the log-sum-exp (Stoke's cross-entropy kernels,
// fused_cross_entropy.h); backward turns the kept logits into their gradient in place,
// (softmax - one-hot) x scale, then multiplies out the hidden states' and the weight's
// gradients. As two nodes (a linear layer, then the loss) the logits' gradient is a new
// tensor beside the logits: at GPT-2 small's batch (16 x 1024 tokens x 50,304 words,
// bf16) 1.65 GB more at the step's peak. Here nothing but this node ever sees the logits,
// so overwriting them is safe.
//
// The weight's 16-bit copy is the step's (half_weights.h: the optimizer writes it), not a
// cast each step, and its gradient is written in fp32 by the matrix product itself.
// chunked_cross_entropy.h is the other trade, for when memory is short: it never holds
// the logits whole and computes them again in backward.
#pragma once

#include <torch/types.h>

namespace stoke::worker {

// Whether LinearCrossEntropy runs here: Stoke's kernels allowed and built, a CUDA
// device, bf16 or fp16 as the compute type, gradients being recorded.
bool LinearCrossEntropyApplies(const torch::Device& device, at::ScalarType compute_dtype);

// mean over rows of cross_entropy(hidden [N, W] x weight [V, W]^T, targets [N] int64),
// the product in compute_dtype and the log-sum-exp in fp32. Its gradient may be taken
// once (a second backward through the same graph is refused: the logits are gone).
// Nothing here waits for the device (the step may be captured in a CUDA graph).
torch::Tensor LinearCrossEntropy(const torch::Tensor& hidden, const torch::Tensor& weight,
                                 const torch::Tensor& targets, at::ScalarType compute_dtype);

}  // namespace stoke::worker
