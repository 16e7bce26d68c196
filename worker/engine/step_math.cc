#include "worker/engine/step_math.h"

#include <torch/torch.h>

#include <cmath>

#include "worker/ops/softmax_cross_entropy.h"

namespace stoke::worker {

torch::Tensor ComputeLoss(const torch::Tensor& outputs, const torch::Tensor& targets,
                          LossKind kind) {
  if (kind == LossKind::kMse) {
    return torch::mse_loss(outputs.to(torch::kFloat32), targets.to(torch::kFloat32));
  }
  const torch::Tensor logits = outputs.reshape({-1, outputs.size(-1)});
  // Logits from autocast: the loss in fp32 arithmetic without an fp32 copy of them.
  if (logits.scalar_type() == torch::kBFloat16 || logits.scalar_type() == torch::kHalf) {
    return SoftmaxCrossEntropy(logits, targets.reshape({-1}));
  }
  return torch::nn::functional::cross_entropy(logits.to(torch::kFloat32), targets.reshape({-1}));
}

torch::Tensor TrainingLoss(Network& net, const torch::Tensor& inputs,
                           const torch::Tensor& targets) {
  if (std::optional<torch::Tensor> loss = net.ForwardLoss(inputs, targets)) return *loss;
  return ComputeLoss(net.forward(inputs), targets, net.loss());
}

double LearningRateAt(const OptimizerConfig& config, uint64_t step, uint64_t total_steps) {
  const double warmup = static_cast<double>(config.warmup_steps);
  if (warmup > 0 && static_cast<double>(step) <= warmup) {
    return config.lr * static_cast<double>(step) / warmup;
  }
  if (config.schedule == LrSchedule::kConstant) return config.lr;
  const double decay_steps = std::max(1.0, static_cast<double>(total_steps) - warmup);
  const double progress = std::min(1.0, (static_cast<double>(step) - warmup) / decay_steps);
  const double cosine = 0.5 * (1.0 + std::cos(M_PI * progress));
  return config.lr * (config.min_lr_ratio + (1.0 - config.min_lr_ratio) * cosine);
}

void ClipGradNorm(const std::vector<torch::Tensor>& parameters, double max_norm) {
  std::vector<torch::Tensor> norms;
  std::vector<torch::Tensor> grads;
  for (const auto& p : parameters) {
    if (!p.grad().defined()) continue;
    grads.push_back(p.grad());
    norms.push_back(p.grad().norm(2).to(torch::kFloat32));
  }
  if (grads.empty()) return;
  torch::Tensor total = torch::stack(norms).norm(2);
  // A device scalar: multiplying by it needs no host read, unlike clip_grad_norm_ in the
  // C++ frontend, which returns the norm as a double.
  torch::Tensor scale = (max_norm / (total + 1e-6)).clamp_max(1.0);
  for (auto& g : grads) g.mul_(scale.to(g.scalar_type()));
}

}  // namespace stoke::worker
