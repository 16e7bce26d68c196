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

#include <c10/core/Device.h>
#include <torch/optim/adamw.h>

#include <cstddef>
#include <functional>
#include <limits>
#include <map>
#include <tuple>
#include <utility>
#include <vector>

#include "worker/common/task.h"  // AdamWRoute

namespace stoke::worker {

class MultiTensorAdamW final : public torch::optim::AdamW {
 public:
  MultiTensorAdamW(std::vector<torch::Tensor> parameters, torch::optim::AdamWOptions options,
                   AdamWRoute route);
  torch::Tensor step(LossClosure closure = nullptr) override;
  // The same update, part by part in the order given (parameters in no part last), with
  // before_part(k) called before part k's update: a job of several ranks makes the device
  // wait there for that part's gradient all-reduce only, so the update of parts already
  // reduced overlaps the reductions still in flight. The per-parameter route (and
  // AMSGrad) updates everything at once, after calling before_part for every part.
  void StepInParts(const std::vector<std::vector<torch::Tensor>>& parts,
                   const std::function<void(size_t)>& before_part);

  // The route steps take on `device` (kAuto and kFused resolved).
  AdamWRoute RouteFor(const torch::Device& device) const;

  // The rate of every parameter group. Its one home is each group's options().lr(), which
  // LibTorch's routes and checkpoints read; the fused route's kernel reads a device copy
  // of it instead, written here as the rate changes, so that a step captured in a CUDA
  // graph stays right: set it outside any capture, before each step.
  void SetLearningRate(double lr);
  // fp16: a float [1] device flag; where it is 1 the fused kernel leaves parameters and
  // state untouched and the step is not counted. Other routes ignore it (the caller must
  // not step them on an overflow).
  void SetFoundInf(torch::Tensor found_inf) { found_inf_ = std::move(found_inf); }
  // Whether steps avoid host values that change from step to step (a CUDA graph may
  // capture them).
  bool Capturable(const torch::Device& device) const;
  // Copies the device step counts into the per-parameter state that checkpoints save.
  void SyncHostState();

 private:
  // A device as (type, index): no string made per parameter and step.
  struct DeviceKey {
    c10::DeviceType type;
    c10::DeviceIndex index;
    explicit DeviceKey(const c10::Device& device) : type(device.type()), index(device.index()) {}
    bool operator<(const DeviceKey& o) const {
      return std::tie(type, index) < std::tie(o.type, o.index);
    }
  };
  struct CounterKey {
    size_t group;
    DeviceKey device;
    bool operator<(const CounterKey& o) const {
      return std::tie(group, device) < std::tie(o.group, o.device);
    }
  };
  // The fused route's per-(group, device) scalars, float32 [] on the device.
  struct DeviceCounters {
    torch::Tensor step;  // steps taken, as the fused kernel reads it
    // A copy of the group's options().lr(), written by PushLearningRate alone; lr_pushed
    // is what it holds (none at first), so that it is written only when the rate changes.
    torch::Tensor lr;
    double lr_pushed = std::numeric_limits<double>::quiet_NaN();
  };
  DeviceCounters& CountersFor(size_t group, const torch::Device& device, int64_t steps_before);
  // Brings the device copy of group `group`'s rate up to date. Writes only on a change:
  // a captured graph then holds no write of its own, and a step with an unchanged rate
  // launches nothing for it.
  void PushLearningRate(size_t group, DeviceCounters& counters);

  AdamWRoute route_;
  torch::Tensor found_inf_;
  std::map<CounterKey, DeviceCounters> counters_;
};

}  // namespace stoke::worker
