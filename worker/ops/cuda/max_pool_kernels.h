// Max pooling of a channels-last bf16/fp16 activation (a ResNet's stem), in kernels of
// Stoke's own. ATen's channels-last max-pool kernels take several times what their bytes
// need (a ResNet-50 step's share is in BENCHMARKS.md). Forward here writes, besides the
// output, which tap of its window each output took (a byte); backward gathers, for each
// input position, the gradients of the at most few outputs whose windows hold it and took
// it, with no atomics.
//
// Torch-free and CUDA-free like the other headers of this folder. Activations are NHWC
// with the channels a multiple of 8 and 16-byte aligned pointers; windows square
// (kernel x kernel, kernel * kernel <= 255), stride and padding the same in both
// dimensions, no dilation, outputs floor((in + 2 * padding - kernel) / stride) + 1.
#pragma once

#include <cstdint>

#include "worker/ops/cuda/half_type.h"

namespace stoke::worker::cuda {

struct PoolShape {
  int64_t batch, height, width, channels;  // the input's
  int64_t out_height, out_width;
  int kernel, stride, padding;
};

// y [batch, out_height, out_width, channels]; taps (uint8, y's shape): the window tap,
// row-major, whose value each output took, chosen as torch's channels-last kernel
// chooses (the first largest; a NaN wins, the last one if several).
const char* MaxPoolForward(const void* x, HalfType type, const PoolShape& shape, void* y,
                           uint8_t* taps, void* stream);

// dx (x's shape) from dy (y's shape) and forward's taps.
const char* MaxPoolBackward(const void* dy, const uint8_t* taps, HalfType type,
                            const PoolShape& shape, void* dx, void* stream);

}  // namespace stoke::worker::cuda
