#include "worker/models/mlp.h"

#include <torch/nn/functional/activation.h>
#include <torch/nn/functional/dropout.h>

namespace stoke::worker {

MlpImpl::MlpImpl(const MlpConfig& config) : config_(config) {
  layers_ = register_module("layers", torch::nn::ModuleList());
  int64_t in = config.input_dim;
  for (int64_t width : config.hidden) {
    layers_->push_back(torch::nn::Linear(in, width));
    in = width;
  }
  layers_->push_back(torch::nn::Linear(in, config.num_classes));
}

torch::Tensor MlpImpl::forward(const torch::Tensor& inputs) {
  // Images [B, C, H, W] are taken as vectors of all their pixels.
  torch::Tensor x = inputs.dim() > 2 ? inputs.flatten(1) : inputs;
  const size_t last = layers_->size() - 1;
  for (size_t i = 0; i < layers_->size(); ++i) {
    x = layers_[i]->as<torch::nn::Linear>()->forward(x);
    if (i == last) break;
    switch (config_.activation) {
      case Activation::kRelu:
        x = torch::relu(x);
        break;
      case Activation::kGelu:
        x = torch::gelu(x);
        break;
      case Activation::kTanh:
        x = torch::tanh(x);
        break;
    }
    if (config_.dropout > 0) {
      x = torch::nn::functional::dropout(
          x,
          torch::nn::functional::DropoutFuncOptions().p(config_.dropout).training(is_training()));
    }
  }
  return x;
}

int64_t MlpImpl::TrainingFlopsPerSample() const {
  // 2 FLOPs per multiply-add in the forward pass, twice that again in the backward pass.
  int64_t macs = 0;
  int64_t in = config_.input_dim;
  for (int64_t width : config_.hidden) {
    macs += in * width;
    in = width;
  }
  macs += in * config_.num_classes;
  return 6 * macs;
}

}  // namespace stoke::worker
