// The output layer and cross-entropy of a language model in one autograd node that never
// holds the [tokens, vocabulary] logits whole: forward computes them a chunk of rows at a
// time, keeping per row only the log-sum-exp; backward recomputes each chunk's logits,
// turns them into softmax minus one-hot, and multiplies out the two gradients. For
// GPT-2's 50,304-word vocabulary at 16 x 1024 tokens the whole logits (bf16, their fp32
// copy, the fp32 log-softmax and its gradient) are ~10 GB; a chunk is a few hundred MB.
// The price is one more output-layer matrix product in backward.
#pragma once

#include <torch/types.h>

#include <cstdint>

namespace stoke::worker {

// mean over rows of cross_entropy(hidden [N, W] x weight [V, W]^T, targets [N]). The
// products run in `compute_dtype` (the autocast dtype, or the inputs' own), the
// log-sum-exp in fp32. chunk_rows: rows per chunk; 0 picks ~256 MB of fp32 logits.
// Nothing here waits for the device (the step may be captured in a CUDA graph).
torch::Tensor ChunkedLinearCrossEntropy(const torch::Tensor& hidden, const torch::Tensor& weight,
                                        const torch::Tensor& targets, at::ScalarType compute_dtype,
                                        int64_t chunk_rows = 0);

}  // namespace stoke::worker
