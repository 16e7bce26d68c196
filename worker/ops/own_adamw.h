// Tensor-level entry to Stoke's AdamW kernel (worker/ops/cuda/adamw_kernels.h), which the
// fused route of MultiTensorAdamW takes instead of ATen's fused AdamW where it applies.
// It exists only in builds with nvcc (STOKE_WITH_CUDA_KERNELS).
#pragma once

#include <torch/types.h>

#include <optional>
#include <vector>

namespace stoke::worker {

struct OwnAdamWTensors {
  std::vector<torch::Tensor> params, grads, exp_avgs, exp_avg_sqs;
  // Empty, or one per parameter: a bf16/fp16 tensor the kernel writes the updated
  // parameter into (the step's weight copy, half_weights.h), or an undefined tensor.
  std::vector<torch::Tensor> half_copies;
};

// True in a build with the kernels where every parameter, gradient and moment is fp32 on
// one CUDA device, dense, and laid out as its parameter (channels-last weights included),
// and every half copy given is a bf16/fp16 tensor there laid out as its parameter.
bool OwnAdamWApplies(const OwnAdamWTensors& tensors);

// One AdamW step of every parameter where OwnAdamWApplies, as at::_fused_adamw_ with one
// step count for all, and true; else nothing, and false (the caller takes ATen's kernel).
// lr and step are device fp32 scalars (step already counts this step); where found_inf (a
// device fp32 scalar) is nonzero nothing changes. Nothing waits for the device.
bool TryOwnAdamWStep(const OwnAdamWTensors& tensors, const torch::Tensor& lr,
                     const torch::Tensor& step, const std::optional<torch::Tensor>& found_inf,
                     double beta1, double beta2, double eps, double weight_decay);

}  // namespace stoke::worker
