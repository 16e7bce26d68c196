// A convolution as bf16/fp16 autocast runs it, multiplying with the weight's 16-bit copy
// the step made (half_weights.h) instead of a cast of its own. Autocast casts every
// convolution's weight each step, one small kernel each (36 a ResNet-34 step, 53 a
// ResNet-50 one), though Stoke's AdamW kernel has already written that copy as it updated
// the weight. Backward is ATen's convolution backward, as autocast's; only the weight's
// gradient is cast back to fp32 there, as autocast's cast does too.
//
// Only in builds with nvcc (STOKE_WITH_CUDA_KERNELS), whose step makes the copies; there,
// and elsewhere outside autocast or for a convolution this does not cover (a bias, groups,
// dilation, a padding mode or padding other than zeros given per side), it is the
// module's forward.
#pragma once

#include <torch/nn/modules/conv.h>
#include <torch/types.h>

namespace stoke::worker {

// conv->forward(x), on the path above where it applies.
torch::Tensor AutocastConv2d(torch::nn::Conv2dImpl& conv, const torch::Tensor& x);

// Whether AutocastConv2d would take the step's copy path for x now (for tests).
bool AutocastConv2dUsesStepCopies(const torch::nn::Conv2dImpl& conv, const torch::Tensor& x);

}  // namespace stoke::worker
