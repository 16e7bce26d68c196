// What the training loop needs of an optimizer, whichever the job chose: a step (whole,
// or part by part as gradient buckets arrive), the learning rate, whether a CUDA graph
// can capture its step, fp16's skipped steps, and the state a checkpoint keeps. The loop
// and the step runner hold this interface; they never ask which optimizer it is.
#pragma once

#include <torch/optim/optimizer.h>
#include <torch/types.h>

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

namespace stoke::worker {

class Optimizer {
 public:
  virtual ~Optimizer() = default;

  // For the job's log: "AdamW (fused)", "SGD".
  virtual std::string name() const = 0;

  // Updates every parameter from its .grad.
  virtual void Step() = 0;
  // Whether StepInParts updates part by part, so that a job of several ranks can update
  // the buckets already reduced while the rest are still in flight.
  virtual bool StepsInParts() const = 0;
  // The same update, part by part in the order given (parameters in no part last), with
  // before_part(k) called before part k's update.
  virtual void StepInParts(const std::vector<std::vector<torch::Tensor>>& parts,
                           const std::function<void(size_t)>& before_part) = 0;

  // Set outside any capture, before each step.
  virtual void SetLearningRate(double lr) = 0;

  // Why a CUDA graph could not capture a step (empty: it can), given whether the rate
  // changes from step to step and whether fp16's loss scaler checks for overflow.
  virtual std::string WhyNotCapturable(bool learning_rate_changes, bool loss_scaling) const = 0;

  // fp16: asks the optimizer to skip, on the device, any step where `found_inf` (a float
  // [1] device flag) is 1. False when it cannot: then the caller reads the flag on the
  // host and does not step.
  virtual bool SkipOnDeviceWhere(const torch::Tensor& found_inf) = 0;

  // The state checkpoints save and restore (LibTorch's optimizer state, so that a
  // checkpoint loads into LibTorch's own optimizers too). SyncHostState first, before
  // saving.
  virtual torch::optim::Optimizer& state() = 0;
  virtual void SyncHostState() {}
};

}  // namespace stoke::worker
