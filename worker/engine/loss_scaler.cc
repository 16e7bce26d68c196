#include "worker/engine/loss_scaler.h"

#include <torch/torch.h>

#include "worker/runtime/torch_compat.h"

namespace stoke::worker {

LossScaler::LossScaler(const LossScaleConfig& config, torch::Device device) : config_(config) {
  const auto f32 = torch::TensorOptions().device(device).dtype(torch::kFloat32);
  scale_ = torch::full({1}, config.initial, f32);
  growth_tracker_ = torch::zeros({1}, f32.dtype(torch::kInt32));
  found_inf_ = torch::zeros({1}, f32);
  skipped_ = torch::zeros({}, f32.dtype(torch::kFloat64));
}

torch::Tensor LossScaler::Scale(const torch::Tensor& loss) const {
  return loss * scale_.squeeze(0).to(loss.scalar_type());
}

void LossScaler::UnscaleAndCheck(const std::vector<torch::Tensor>& grads) {
  torch::NoGradGuard no_grad;
  found_inf_.zero_();
  if (grads.empty()) return;
  const torch::Tensor inv_scale = scale_.reciprocal();
  compat::NonFiniteCheckAndUnscale(grads, found_inf_, inv_scale);
}

void LossScaler::Update() {
  torch::NoGradGuard no_grad;
  skipped_.add_(found_inf_.squeeze(0).to(torch::kFloat64));
  compat::UpdateScale(scale_, growth_tracker_, found_inf_, config_.growth_factor,
                      config_.backoff_factor, static_cast<int64_t>(config_.growth_interval));
}

void LossScaler::Restore(const torch::Tensor& scale, const torch::Tensor& growth_tracker,
                         const torch::Tensor& skipped_steps) {
  torch::NoGradGuard no_grad;
  scale_.copy_(scale.reshape(scale_.sizes()));
  growth_tracker_.copy_(growth_tracker.reshape(growth_tracker_.sizes()));
  skipped_.copy_(skipped_steps.reshape(skipped_.sizes()));
}

}  // namespace stoke::worker
