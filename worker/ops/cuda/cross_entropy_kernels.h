// Softmax cross-entropy over rows of bf16 or fp16 logits in two CUDA kernels: forward
// reads each row once and keeps its log-sum-exp; backward reads the row again and writes
// (softmax - one_hot) x scale in the logits' own type. Nothing fp32 of the logits' size
// is ever written: no casts, no fp32 probabilities kept for backward, no generic multiply
// (for GPT-2's logits, what that saves a step is in BENCHMARKS.md).
//
// This header has neither torch nor CUDA in it: the .cu file is compiled by nvcc without
// torch's headers, and callers pass raw device pointers and the stream as void*.
#pragma once

#include <cstdint>

#include "worker/ops/cuda/half_type.h"

namespace stoke::worker::cuda {

// logits: [rows, cols] contiguous on the device; targets: [rows] int64. Writes per row
// the loss (log-sum-exp minus the target's logit; NaN for a target outside [0, cols))
// and the log-sum-exp that backward reuses. Returns nullptr, or the CUDA error's text.
const char* CrossEntropyForward(const void* logits, HalfType type, const int64_t* targets,
                                int64_t rows, int64_t cols, float* row_loss, float* row_lse,
                                void* stream);

// grad[r, j] = (exp(logit[r, j] - lse[r]) - [j == target[r]]) * (*grad_loss) * scale, in
// fp32 arithmetic, stored in the logits' type. grad_loss is a device scalar (the mean
// loss's incoming gradient: 1, or the fp16 loss scale), so nothing waits on the host.
const char* CrossEntropyBackward(const void* logits, HalfType type, const int64_t* targets,
                                 const float* row_lse, const float* grad_loss, float scale,
                                 int64_t rows, int64_t cols, void* grad, void* stream);

}  // namespace stoke::worker::cuda
