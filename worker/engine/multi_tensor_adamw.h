// AdamW that updates all parameters of a step together instead of one after another.
// LibTorch's optim::AdamW loops over parameters, launching about ten kernels for each:
// for a model of a few hundred tensors that is thousands of launches per step. Here each
// operation of the update is one multi-tensor call over all parameters (ATen's _foreach_*
// ops), or, on CUDA with torch 2, a single fused kernel (at::_fused_adamw_) — the two
// routes PyTorch's own optimizer takes (foreach=True, fused=True).
//
// The update and its state are AdamW's own (same AdamWParamState per parameter, same
// arithmetic), so checkpoints written by either load into the other.
#pragma once

#include <torch/optim/adamw.h>

#include "worker/common/task.h"  // AdamWRoute

namespace stoke::worker {

class MultiTensorAdamW final : public torch::optim::AdamW {
 public:
  MultiTensorAdamW(std::vector<torch::Tensor> parameters, torch::optim::AdamWOptions options,
                   AdamWRoute route);
  torch::Tensor step(LossClosure closure = nullptr) override;

  // The route steps take on `device` (kAuto and kFused resolved).
  AdamWRoute RouteFor(const torch::Device& device) const;

 private:
  AdamWRoute route_;
};

}  // namespace stoke::worker
