#include "worker/engine/optimizers.h"

#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include "worker/engine/multi_tensor_adamw.h"

namespace stoke::worker {

std::unique_ptr<torch::optim::Optimizer> MakeOptimizer(const OptimizerConfig& config,
                                                       std::vector<torch::Tensor> parameters) {
  struct Maker {
    const OptimizerConfig& config;
    std::vector<torch::Tensor>& parameters;
    std::unique_ptr<torch::optim::Optimizer> operator()(const AdamWConfig& a) const {
      return std::make_unique<MultiTensorAdamW>(std::move(parameters),
                                                torch::optim::AdamWOptions(config.lr)
                                                    .betas({a.beta1, a.beta2})
                                                    .eps(a.eps)
                                                    .weight_decay(config.weight_decay),
                                                a.route);
    }
    std::unique_ptr<torch::optim::Optimizer> operator()(const SgdConfig& s) const {
      return std::make_unique<torch::optim::SGD>(std::move(parameters),
                                                 torch::optim::SGDOptions(config.lr)
                                                     .momentum(s.momentum)
                                                     .nesterov(s.nesterov)
                                                     .weight_decay(config.weight_decay));
    }
  };
  return std::visit(Maker{config, parameters}, config.kind);
}

}  // namespace stoke::worker
