// Dynamic loss scaling for fp16 training, as PyTorch's GradScaler does it, with the scale,
// the overflow flag and the counters all on the device so that a step never waits for
// the host: the loss is multiplied by the scale before backward; after backward the
// gradients are divided by it and checked for inf/NaN in one multi-tensor pass; the
// optimizer skips the step where the check found one (the fused AdamW reads the flag on
// the device), and the scale halves after an overflow and doubles after
// `growth_interval` clean steps.
#pragma once

#include <torch/types.h>

#include <vector>

#include "worker/common/task.h"

namespace stoke::worker {

class LossScaler {
 public:
  LossScaler(const LossScaleConfig& config, torch::Device device);

  // loss x scale.
  torch::Tensor Scale(const torch::Tensor& loss) const;
  // Divides the gradients by the scale in place and sets found_inf() to 1 if any of them
  // holds an inf or NaN (0 otherwise).
  void UnscaleAndCheck(const std::vector<torch::Tensor>& grads);
  // After the optimizer: counts a skipped step and adjusts the scale.
  void Update();

  // float32 [1]: 1 where the last unscaled gradients overflowed.
  const torch::Tensor& found_inf() const { return found_inf_; }
  // float32 []: the current scale; float64 []: steps skipped so far. For metrics, read
  // without waiting (see MetricWindow).
  const torch::Tensor& scale() const { return scale_; }
  const torch::Tensor& skipped_steps() const { return skipped_; }
  // int32 [1]: clean steps since the scale last changed. With scale() and skipped_steps(),
  // what a checkpoint keeps, so a resumed job goes on with the scale it had learned.
  const torch::Tensor& growth_tracker() const { return growth_tracker_; }
  // Sets the three from a checkpoint's copies (any device; shapes as above).
  void Restore(const torch::Tensor& scale, const torch::Tensor& growth_tracker,
               const torch::Tensor& skipped_steps);

 private:
  LossScaleConfig config_;
  torch::Tensor scale_;           // float32 [1]
  torch::Tensor growth_tracker_;  // int32 [1]: clean steps since the last change
  torch::Tensor found_inf_;       // float32 [1]
  torch::Tensor skipped_;         // float64 []
};

}  // namespace stoke::worker
