// Layer norm over the last dimension for an fp32 residual stream that feeds bf16/fp16
// matrix products, in kernels of Stoke's own. Autocast runs ATen's layer norm in fp32 and
// writes an fp32 output that the next linear casts to bf16; backward casts the bf16
// gradient back to fp32 first. Here forward writes the low-precision output directly
// and backward reads the low-precision gradient directly: two casts fewer per norm.
//
// Torch-free and CUDA-free like cross_entropy_kernels.h: raw device pointers, the stream
// as void*, nullptr or CUDA's error text back.
#pragma once

#include <cstdint>

#include "worker/ops/cuda/half_type.h"

namespace stoke::worker::cuda {

// x [rows, width] fp32 contiguous; gamma, beta [width] fp32. Writes y [rows, width] in
// `out`'s type and each row's mean and 1/sqrt(var + eps) (fp32 [rows]). With a branch
// ([rows, width] in `out`'s type; else nullptr) the row normalised is x + branch, which
// is written to `sum` ([rows, width] fp32): a residual connection and the next norm in
// one pass.
const char* LayerNormForward(const float* x, const void* branch, float* sum, const float* gamma,
                             const float* beta, int64_t rows, int64_t width, float eps, void* y,
                             HalfType out, float* mean, float* rstd, void* stream);

// dy [rows, width] in `dy_type`; x (the row normalised: `sum` when forward had a branch),
// gamma, mean, rstd as forward had or wrote them. Writes dx [rows, width] fp32, plus
// residual_grad (fp32, the gradient the stream brings from further on; nullptr: none),
// also in `dy_type` to dx_low when not nullptr (the branch's gradient); and dgamma, dbeta
// [width] fp32. `partials` is scratch of LayerNormBackwardScratch(rows, width) floats.
int64_t LayerNormBackwardScratch(int64_t rows, int64_t width);
const char* LayerNormBackward(const void* dy, HalfType dy_type, const float* x, const float* gamma,
                              const float* mean, const float* rstd, const float* residual_grad,
                              int64_t rows, int64_t width, float* dx, void* dx_low, float* dgamma,
                              float* dbeta, float* partials, void* stream);

}  // namespace stoke::worker::cuda
