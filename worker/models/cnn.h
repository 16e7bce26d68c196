// A small convolutional image classifier: per stage a 3x3 convolution, batch norm, ReLU
// and a 2x2 max-pool; then flatten, a hidden linear layer with ReLU (and dropout), and a
// linear layer to the classes. Enough for MNIST-sized data on a laptop CPU.
#pragma once

#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/linear.h>

#include <string>
#include <vector>

#include "worker/models/network.h"

namespace stoke::worker {

class CnnImpl : public Network {
 public:
  // `image` is [channels, height, width].
  CnnImpl(const CnnConfig& config, const std::vector<int64_t>& image, int64_t num_classes);
  torch::Tensor forward(const torch::Tensor& inputs) override;
  int64_t TrainingFlopsPerSample() const override { return flops_; }
  bool PrefersChannelsLast() const override { return true; }
  // model.torchscript.pt: the eval-mode forward with the trained weights (scripted_export.h).
  void WriteExports(const std::string& dir) override;

 private:
  CnnConfig config_;
  torch::nn::ModuleList convs_;
  torch::nn::ModuleList norms_;
  torch::nn::Linear hidden_{nullptr};
  torch::nn::Linear out_{nullptr};
  int64_t flops_ = 0;
};

TORCH_MODULE(Cnn);

}  // namespace stoke::worker
