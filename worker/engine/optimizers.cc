#include "worker/engine/optimizers.h"

#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include <utility>

#include "worker/engine/multi_tensor_adamw.h"

namespace stoke::worker {
namespace {

// AdamW over all parameters at once (multi_tensor_adamw.h).
class AdamWOptimizer final : public Optimizer {
 public:
  AdamWOptimizer(std::vector<torch::Tensor> parameters, torch::optim::AdamWOptions options,
                 AdamWRoute route, const torch::Device& device)
      : adamw_(std::move(parameters), std::move(options), route), device_(device) {}

  std::string name() const override {
    switch (adamw_.RouteFor(device_)) {
      case AdamWRoute::kFused:
        return "AdamW (fused)";
      case AdamWRoute::kForeach:
        return "AdamW (foreach)";
      default:
        return "AdamW (per parameter)";
    }
  }
  void Step() override { adamw_.step(); }
  bool StepsInParts() const override { return true; }
  void StepInParts(const std::vector<std::vector<torch::Tensor>>& parts,
                   const std::function<void(size_t)>& before_part) override {
    adamw_.StepInParts(parts, before_part);
  }
  void SetLearningRate(double lr) override { adamw_.SetLearningRate(lr); }
  std::string WhyNotCapturable(bool, bool) const override {
    if (adamw_.Capturable(device_)) return "";
    return "only the fused AdamW keeps its step count and learning rate on the device "
           "(optimizer.adamw.implementation: fused or auto)";
  }
  bool SkipOnDeviceWhere(const torch::Tensor& found_inf) override {
    if (!adamw_.Capturable(device_)) return false;
    adamw_.SetFoundInf(found_inf);
    return true;
  }
  torch::optim::Optimizer& state() override { return adamw_; }
  void SyncHostState() override { adamw_.SyncHostState(); }

 private:
  MultiTensorAdamW adamw_;
  torch::Device device_;
};

// LibTorch's SGD: its learning rate is a host value in each parameter group.
class SgdOptimizer final : public Optimizer {
 public:
  SgdOptimizer(std::vector<torch::Tensor> parameters, torch::optim::SGDOptions options)
      : sgd_(std::move(parameters), std::move(options)) {}

  std::string name() const override { return "SGD"; }
  void Step() override { sgd_.step(); }
  bool StepsInParts() const override { return false; }
  void StepInParts(const std::vector<std::vector<torch::Tensor>>& parts,
                   const std::function<void(size_t)>& before_part) override {
    for (size_t k = 0; k < parts.size(); ++k) before_part(k);
    sgd_.step();
  }
  void SetLearningRate(double lr) override {
    for (auto& group : sgd_.param_groups()) group.options().set_lr(lr);
  }
  std::string WhyNotCapturable(bool learning_rate_changes, bool loss_scaling) const override {
    if (learning_rate_changes) {
      return "SGD reads its learning rate from the host; capture needs a constant rate "
             "(no warmup or schedule) or AdamW";
    }
    if (loss_scaling) return "fp16 with SGD checks for overflow on the host";
    return "";
  }
  bool SkipOnDeviceWhere(const torch::Tensor&) override { return false; }
  torch::optim::Optimizer& state() override { return sgd_; }

 private:
  torch::optim::SGD sgd_;
};

}  // namespace

std::unique_ptr<Optimizer> MakeOptimizer(const OptimizerConfig& config,
                                         std::vector<torch::Tensor> parameters,
                                         const torch::Device& device) {
  struct Maker {
    const OptimizerConfig& config;
    std::vector<torch::Tensor>& parameters;
    const torch::Device& device;
    std::unique_ptr<Optimizer> operator()(const AdamWConfig& a) const {
      return std::make_unique<AdamWOptimizer>(std::move(parameters),
                                              torch::optim::AdamWOptions(config.lr)
                                                  .betas({a.beta1, a.beta2})
                                                  .eps(a.eps)
                                                  .weight_decay(config.weight_decay),
                                              a.route, device);
    }
    std::unique_ptr<Optimizer> operator()(const SgdConfig& s) const {
      return std::make_unique<SgdOptimizer>(std::move(parameters),
                                            torch::optim::SGDOptions(config.lr)
                                                .momentum(s.momentum)
                                                .nesterov(s.nesterov)
                                                .weight_decay(config.weight_decay));
    }
  };
  return std::visit(Maker{config, parameters, device}, config.kind);
}

}  // namespace stoke::worker
