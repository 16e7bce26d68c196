// A linear layer as bf16/fp16 autocast runs it (inputs, weight and bias cast to the
// autocast type, one matrix product whose epilogue adds the bias), whose backward sums
// the bias gradient in Stoke's column-sum kernel (worker/ops/cuda/column_sum_kernels.h)
// straight into fp32, instead of ATen's generic reduction followed by a cast. Only in
// builds with nvcc (STOKE_WITH_CUDA_KERNELS); elsewhere, and outside autocast, it is
// torch::linear.
#pragma once

#include <torch/types.h>

namespace stoke::worker {

// torch::linear(x, weight, bias), with the kernels where they apply: x on a CUDA device,
// bf16/fp16 autocast on, a bias. Without gradients being recorded (evaluation) too: the
// weights' 16-bit copies are then the step's, not casts autocast keeps to its end.
torch::Tensor AutocastLinear(const torch::Tensor& x, const torch::Tensor& weight,
                             const torch::Tensor& bias);

// torch::gelu(torch::linear(x, weight, bias)) (exact GELU), on the same path as
// AutocastLinear, where backward takes the GELU's gradient and the bias gradient in one
// pass over the output gradient (column_sum_kernels.h) instead of two.
torch::Tensor AutocastLinearGelu(const torch::Tensor& x, const torch::Tensor& weight,
                                 const torch::Tensor& bias);

// torch::linear(torch::gelu(torch::linear(x, w1, b1)), w2, b2): a transformer's MLP, on
// the same path, holding for backward the GELU's input but not its output (backward
// computes the GELU again). Both layers need a bias.
torch::Tensor AutocastGeluMlp(const torch::Tensor& x, const torch::Tensor& w1,
                              const torch::Tensor& b1, const torch::Tensor& w2,
                              const torch::Tensor& b2);
// torch::relu(torch::linear(x, weight, bias)), on the same path, with the bias and the
// ReLU in the matrix product's epilogue (ATen's _addmm_activation) and the ReLU's backward
// taken with the bias gradient in one pass, from the output alone.
torch::Tensor AutocastLinearRelu(const torch::Tensor& x, const torch::Tensor& weight,
                                 const torch::Tensor& bias);

// Whether AutocastLinear would take Stoke's path for x now (for tests).
bool AutocastLinearUsesOwnKernels(const torch::Tensor& x, const torch::Tensor& bias);

}  // namespace stoke::worker
