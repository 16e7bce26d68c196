// Residual networks for image classification (He et al. 2016): ResNet-18 and -34 with
// basic blocks, ResNet-50 with bottleneck blocks, behind either the ImageNet stem or a
// small-image stem for CIFAR-sized inputs.
#pragma once

#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>

#include <cstdint>
#include <string>
#include <vector>

#include "worker/common/task.h"
#include "worker/models/network.h"

namespace stoke::worker {

// One residual block. Basic: 3x3 -> 3x3. Bottleneck: 1x1 -> 3x3 -> 1x1 to 4x the
// width. A 1x1 projection with batch norm replaces the identity shortcut wherever the
// block changes the channels or the resolution.
class ResidualBlockImpl : public torch::nn::Module {
 public:
  ResidualBlockImpl(int64_t in_channels, int64_t width, int64_t stride, bool bottleneck);
  torch::Tensor forward(const torch::Tensor& inputs);

  int64_t out_channels() const { return out_channels_; }
  int64_t stride() const { return stride_; }
  // Multiply-adds of one sample whose input is height x width pixels.
  int64_t Macs(int64_t height, int64_t width) const;
  // TorchScript lines that take `x` through the block in eval mode, the block being
  // `name` in the network (scripted_export.h).
  std::string ScriptLines(const std::string& name) const;

 private:
  struct ConvShape {
    int64_t in, out, kernel, stride;
  };
  int64_t in_channels_;
  int64_t out_channels_;
  int64_t stride_;
  std::vector<ConvShape> shapes_;  // of convs_, for counting multiply-adds
  torch::nn::ModuleList convs_;
  torch::nn::ModuleList norms_;
  torch::nn::Conv2d shortcut_{nullptr};
  torch::nn::BatchNorm2d shortcut_norm_{nullptr};
};

TORCH_MODULE(ResidualBlock);

class ResNetImpl : public Network {
 public:
  // `image` is [channels, height, width]. Throws std::invalid_argument for a depth other
  // than 18, 34 or 50.
  ResNetImpl(const ResNetConfig& config, const std::vector<int64_t>& image, int64_t num_classes);
  torch::Tensor forward(const torch::Tensor& inputs) override;
  int64_t TrainingFlopsPerSample() const override { return flops_; }
  bool PrefersChannelsLast() const override { return true; }
  // Per residual block.
  bool SupportsActivationCheckpointing() const override { return true; }

  bool small_stem() const { return small_stem_; }
  // model.torchscript.pt: the eval-mode forward with the trained weights (scripted_export.h).
  void WriteExports(const std::string& dir) override;

 private:
  bool small_stem_;
  torch::nn::Conv2d stem_{nullptr};
  torch::nn::BatchNorm2d stem_norm_{nullptr};
  torch::nn::ModuleList blocks_;
  torch::nn::Linear classifier_{nullptr};
  int64_t flops_ = 0;
};

TORCH_MODULE(ResNet);

}  // namespace stoke::worker
