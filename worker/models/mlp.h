// A multi-layer perceptron classifier: Linear -> activation -> dropout, per hidden layer,
// then a Linear to the classes.
#pragma once

#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/linear.h>

#include <string>

#include "worker/common/task.h"
#include "worker/models/network.h"

namespace stoke::worker {

class MlpImpl : public Network {
 public:
  explicit MlpImpl(const MlpConfig& config);
  torch::Tensor forward(const torch::Tensor& inputs) override;
  int64_t TrainingFlopsPerSample() const override;
  // Per hidden layer (Linear, activation, dropout).
  bool SupportsActivationCheckpointing() const override { return true; }
  LossKind loss() const override {
    return config_.regression.empty() ? LossKind::kCrossEntropy : LossKind::kMse;
  }
  // model.torchscript.pt: the eval-mode forward with the trained weights (scripted_export.h).
  void WriteExports(const std::string& dir) override;

 private:
  MlpConfig config_;
  torch::nn::ModuleList layers_;
};

TORCH_MODULE(Mlp);

}  // namespace stoke::worker
