// A multi-layer perceptron: hidden layers, each optionally checkpointed, then the
// classifier layer.
#include "worker/models/mlp.h"

#include <torch/nn/functional/activation.h>
#include <torch/nn/functional/dropout.h>

#include <utility>

#include "worker/models/scripted_export.h"
#include "worker/ops/activation_checkpoint.h"
#include "worker/ops/half_linear.h"

namespace stoke::worker {
namespace {

// Linear -> activation -> dropout. forward() wraps it in a lambda holding the layer's
// shared pointer and the settings by value: a checkpointed layer's recompute in backward
// then depends on nothing but what the autograd graph holds.
torch::Tensor HiddenLayer(torch::nn::LinearImpl& linear, Activation activation, double dropout,
                          bool training, const torch::Tensor& inputs) {
  torch::Tensor x;
  switch (activation) {
    case Activation::kRelu:
      x = AutocastLinearRelu(inputs, linear.weight, linear.bias);
      break;
    case Activation::kGelu:
      x = AutocastLinearGelu(inputs, linear.weight, linear.bias);
      break;
    case Activation::kTanh:
      x = torch::tanh(AutocastLinear(inputs, linear.weight, linear.bias));
      break;
  }
  if (dropout > 0) {
    x = torch::nn::functional::dropout(
        x, torch::nn::functional::DropoutFuncOptions().p(dropout).training(training));
  }
  return x;
}

}  // namespace

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
  for (size_t i = 0; i < last; ++i) {
    auto layer = [linear = layers_->ptr<torch::nn::LinearImpl>(i), activation = config_.activation,
                  dropout = config_.dropout, training = is_training()](const torch::Tensor& in) {
      return HiddenLayer(*linear, activation, dropout, training, in);
    };
    if (checkpoint_blocks_) {
      CheckpointOptions options;
      options.preserve_rng_state = config_.dropout > 0 && is_training();
      x = CheckpointedForward(std::move(layer), x, std::move(options));
    } else {
      x = layer(x);
    }
  }
  const auto& classifier = *layers_->ptr<torch::nn::LinearImpl>(last);
  torch::Tensor out = AutocastLinear(x, classifier.weight, classifier.bias);
  if (config_.regression.size() > 1) {  // shaped as one target, for the loss
    std::vector<int64_t> shape = {out.size(0)};
    shape.insert(shape.end(), config_.regression.begin(), config_.regression.end());
    out = out.view(shape);
  }
  return out;
}

void MlpImpl::WriteExports(const std::string& dir) {
  const std::string activation = config_.activation == Activation::kRelu   ? "torch.relu"
                                 : config_.activation == Activation::kGelu ? "torch.gelu"
                                                                           : "torch.tanh";
  std::string source =
      "def forward(self, inputs):\n"
      "    x = inputs.flatten(1) if inputs.dim() > 2 else inputs\n";
  const size_t last = layers_->size() - 1;
  for (size_t i = 0; i <= last; ++i) {
    const std::string layer = "layers." + std::to_string(i);
    const std::string linear = "torch.linear(x, " + ScriptTensor(layer + ".weight") + ", " +
                               ScriptTensor(layer + ".bias") + ")";
    source +=
        i < last ? "    x = " + activation + "(" + linear + ")\n" : "    return " + linear + "\n";
  }
  SaveScriptedNetwork(*this, "Mlp", source, ScriptedExportPath(dir));
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
