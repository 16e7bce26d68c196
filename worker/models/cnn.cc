#include "worker/models/cnn.h"

#include <torch/nn/functional/dropout.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/conv.h>

#include <stdexcept>

#include "worker/models/scripted_export.h"
#include "worker/ops/fused_batch_norm.h"
#include "worker/ops/fused_max_pool.h"
#include "worker/ops/half_linear.h"

namespace stoke::worker {

CnnImpl::CnnImpl(const CnnConfig& config, const std::vector<int64_t>& image, int64_t num_classes)
    : config_(config) {
  if (image.size() != 3) throw std::invalid_argument("model.cnn: needs images [C, H, W]");
  convs_ = register_module("convs", torch::nn::ModuleList());
  norms_ = register_module("norms", torch::nn::ModuleList());
  int64_t channels = image[0], height = image[1], width = image[2];
  int64_t macs = 0;
  for (int64_t out : config.channels) {
    if (height < 2 || width < 2) {
      throw std::invalid_argument("model.cnn.channels: too many stages for " +
                                  std::to_string(image[1]) + "x" + std::to_string(image[2]) +
                                  " images (each halves the size)");
    }
    convs_->push_back(
        torch::nn::Conv2d(torch::nn::Conv2dOptions(channels, out, 3).padding(1).bias(false)));
    norms_->push_back(torch::nn::BatchNorm2d(out));
    macs += height * width * channels * out * 9;
    channels = out;
    height /= 2;
    width /= 2;
  }
  const int64_t flat = channels * height * width;
  hidden_ = register_module("hidden", torch::nn::Linear(flat, config.hidden));
  out_ = register_module("out", torch::nn::Linear(config.hidden, num_classes));
  macs += flat * config.hidden + config.hidden * num_classes;
  flops_ = 6 * macs;  // 2 FLOPs per multiply-add, forward once and backward twice
}

torch::Tensor CnnImpl::forward(const torch::Tensor& inputs) {
  torch::Tensor x = inputs;
  for (size_t i = 0; i < convs_->size(); ++i) {
    x = convs_[i]->as<torch::nn::Conv2d>()->forward(x);
    // Norm and ReLU in one pass each way where Stoke's kernels apply (fused_batch_norm.h).
    x = BatchNormAct(*norms_[i]->as<torch::nn::BatchNorm2d>(), x, torch::Tensor(), /*relu=*/true);
    // Stoke's pooling kernels where they apply (fused_max_pool.h): ATen's channels-last
    // pooling took a fifth of this network's step on an H200, its backward most of that.
    x = MaxPool2d(x, /*kernel=*/2, /*stride=*/2, /*padding=*/0);
  }
  // Bias and ReLU in the matrix product's epilogue under autocast (half_linear.h).
  x = AutocastLinearRelu(x.flatten(1), hidden_->weight, hidden_->bias);
  if (config_.dropout > 0) {
    x = torch::nn::functional::dropout(
        x, torch::nn::functional::DropoutFuncOptions().p(config_.dropout).training(is_training()));
  }
  return AutocastLinear(x, out_->weight, out_->bias);
}

void CnnImpl::WriteExports(const std::string& dir) {
  std::string source = "def forward(self, inputs):\n    x = inputs\n";
  for (size_t i = 0; i < convs_->size(); ++i) {
    const std::string n = std::to_string(i);
    const double eps = norms_[i]->as<torch::nn::BatchNorm2d>()->options.eps();
    source += "    x = torch.relu(" +
              ScriptBatchNorm(ScriptConv2d("x", "convs." + n, 1, 1), "norms." + n, eps) + ")\n";
    source += "    x = torch.max_pool2d(x, [2, 2], [2, 2], [0, 0])\n";
  }
  source += "    x = torch.relu(torch.linear(x.flatten(1), " + ScriptTensor("hidden.weight") +
            ", " + ScriptTensor("hidden.bias") + "))\n";
  source += "    return torch.linear(x, " + ScriptTensor("out.weight") + ", " +
            ScriptTensor("out.bias") + ")\n";
  SaveScriptedNetwork(*this, "Cnn", source, ScriptedExportPath(dir));
}

}  // namespace stoke::worker
