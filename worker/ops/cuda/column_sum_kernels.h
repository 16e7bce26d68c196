// Column sums of a bf16/fp16 matrix into fp32: the bias gradient of a linear layer (the
// sum of the output gradient over all rows). ATen reduces the low-precision gradient
// across rows with its generic reduction, then casts the result to the fp32 bias, far
// slower than its bytes need (BENCHMARKS.md). These read each element once in 16-byte
// loads and write fp32 straight away.
//
// Deterministic: each slice of rows is summed by one block, and the slices' partial sums
// are added in a fixed order by a second kernel.
//
// Torch-free and CUDA-free like the other headers here: raw device pointers, the stream
// as void*, nullptr or CUDA's error text back.
#pragma once

#include <cstdint>

#include "worker/ops/cuda/half_type.h"

namespace stoke::worker::cuda {

// Floats of scratch ColumnSums needs for a [rows, width] input.
int64_t ColumnSumScratch(int64_t rows, int64_t width);

// in [rows, width] contiguous in `type`; writes out[c] = sum over rows of in[r][c] (fp32
// arithmetic). `partials` holds ColumnSumScratch(rows, width) floats.
const char* ColumnSums(const void* in, HalfType type, int64_t rows, int64_t width, float* out,
                       float* partials, void* stream);

// The backward of gelu(pre) (exact, erf form) followed by the column sums above:
// dpre = dy * gelu'(pre), written in `type`, and out[c] = sum over rows of dpre[r][c] as
// written (the bias gradient of the linear layer whose output went into the GELU). dy,
// pre and dpre are [rows, width] contiguous; the gradient is summed in the same pass
// that writes it, instead of being read again.
const char* GeluBackwardColumnSums(const void* dy, const void* pre, HalfType type, int64_t rows,
                                   int64_t width, void* dpre, float* out, float* partials,
                                   void* stream);

// The same for relu(pre), from the ReLU's output: dpre = relu_out > 0 ? dy : 0 (what
// ATen's threshold_backward gives), and its column sums.
const char* ReluBackwardColumnSums(const void* dy, const void* relu_out, HalfType type,
                                   int64_t rows, int64_t width, void* dpre, float* out,
                                   float* partials, void* stream);

}  // namespace stoke::worker::cuda
