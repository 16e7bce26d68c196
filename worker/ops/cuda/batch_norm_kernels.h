// Training-mode batch norm of a channels-last bf16/fp16 activation, with the ReLU after
// it and the residual add before that ReLU folded in, in kernels of Stoke's own. ATen
// runs a ResNet block's norm, add and ReLU as separate passes over the activation each
// way (statistics, transform, ReLU, add; ReLU's backward, the norm's reduce and
// element-wise backward): most of a ResNet-50 step went to them (BENCHMARKS.md). Here
// forward is two passes (statistics, then normalise + add + ReLU) and backward two
// (per-channel sums of the masked gradient, then the input's and the residual's
// gradients).
//
// Torch-free and CUDA-free like the other headers of this folder: raw device pointers,
// the stream as void*, nullptr or CUDA's error text back. Activations are [rows,
// channels] with channels contiguous (NHWC flattened: rows = N * H * W), channels a
// multiple of 8 and every pointer 16-byte aligned (the kernels read 8 channels at once);
// per-channel values are fp32.
#pragma once

#include <cstdint>

#include "worker/ops/cuda/half_type.h"

namespace stoke::worker::cuda {

// Floats of scratch BatchNormForward and BatchNormBackward need on the current device.
int64_t BatchNormScratch(int64_t rows, int64_t channels);

// y = relu?(gamma * (x - mean) * invstd + beta + residual?), mean and variance over the
// rows (biased variance normalises; rows >= 2). Writes the batch's mean and
// 1/sqrt(var + eps) per channel, and updates running_mean and running_var (unbiased)
// with `momentum` as torch's BatchNorm does, and adds one to batches_seen (the module's
// num_batches_tracked, a device int64; nullptr: none) in the same launch, where a separate
// add would be one more kernel per norm. residual: [rows, channels] in x's type or nullptr.
const char* BatchNormForward(const void* x, const void* residual, HalfType type, const float* gamma,
                             const float* beta, int64_t rows, int64_t channels, float eps,
                             float momentum, bool relu, float* running_mean, float* running_var,
                             int64_t* batches_seen, void* y, float* mean, float* invstd,
                             float* scratch, void* stream);

// The gradients of BatchNormForward's y given dy (x's type): dx, dresidual (the gradient
// after the ReLU's mask; nullptr: not wanted), dgamma, dbeta. y is forward's output (the
// ReLU's mask; nullptr without the ReLU); mean and invstd as forward wrote them.
const char* BatchNormBackward(const void* dy, const void* x, const void* y, HalfType type,
                              const float* gamma, const float* mean, const float* invstd,
                              int64_t rows, int64_t channels, void* dx, void* dresidual,
                              float* dgamma, float* dbeta, float* scratch, void* stream);

}  // namespace stoke::worker::cuda
