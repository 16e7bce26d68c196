// ResNet: the blocks, the two stems, initialisation, and the analytic FLOP count.
#include "worker/models/resnet.h"

#include <torch/nn/init.h>

#include <array>
#include <stdexcept>
#include <string>
#include <utility>

#include "worker/models/scripted_export.h"
#include "worker/ops/activation_checkpoint.h"
#include "worker/ops/fused_batch_norm.h"
#include "worker/ops/fused_max_pool.h"
#include "worker/ops/half_conv.h"

namespace stoke::worker {
namespace {

// Spatial size after a convolution or pooling window.
int64_t OutSize(int64_t in, int64_t kernel, int64_t stride, int64_t padding) {
  return (in + 2 * padding - kernel) / stride + 1;
}

// A convolution that keeps the resolution (up to its stride), initialised for the ReLU
// that follows (He et al. 2015, fan-out as in the ResNet paper's code).
torch::nn::Conv2d Conv(int64_t in, int64_t out, int64_t kernel, int64_t stride) {
  // No bias: the batch norm that follows every convolution has its own.
  torch::nn::Conv2d conv(
      torch::nn::Conv2dOptions(in, out, kernel).stride(stride).padding(kernel / 2).bias(false));
  torch::nn::init::kaiming_normal_(conv->weight, 0.0, torch::kFanOut, torch::kReLU);
  return conv;
}

// Blocks per stage, and whether they are bottlenecks, for each supported depth.
struct Layout {
  std::array<int64_t, 4> blocks;
  bool bottleneck;
};

Layout LayoutFor(int depth) {
  switch (depth) {
    case 18:
      return {{2, 2, 2, 2}, false};
    case 34:
      return {{3, 4, 6, 3}, false};
    case 50:
      return {{3, 4, 6, 3}, true};
    default:
      throw std::invalid_argument("model.resnet.depth: must be 18, 34 or 50, not " +
                                  std::to_string(depth));
  }
}

}  // namespace

ResidualBlockImpl::ResidualBlockImpl(int64_t in_channels, int64_t width, int64_t stride,
                                     bool bottleneck)
    : in_channels_(in_channels), out_channels_(bottleneck ? 4 * width : width), stride_(stride) {
  if (bottleneck) {
    // The stride sits on the 3x3 rather than on the first 1x1 (the "v1.5" placement most
    // implementations use): a strided 1x1 would discard three quarters of its input.
    shapes_ = {{in_channels, width, 1, 1}, {width, width, 3, stride}, {width, out_channels_, 1, 1}};
  } else {
    shapes_ = {{in_channels, width, 3, stride}, {width, width, 3, 1}};
  }
  convs_ = register_module("convs", torch::nn::ModuleList());
  norms_ = register_module("norms", torch::nn::ModuleList());
  for (const ConvShape& s : shapes_) {
    convs_->push_back(Conv(s.in, s.out, s.kernel, s.stride));
    norms_->push_back(torch::nn::BatchNorm2d(s.out));
  }
  // Each block starts as the identity (Goyal et al. 2017): the last batch norm of the
  // residual branch scales by zero, so early training sees a shallower network.
  torch::nn::init::zeros_(norms_[norms_->size() - 1]->as<torch::nn::BatchNorm2d>()->weight);
  if (stride != 1 || in_channels != out_channels_) {
    shortcut_ = register_module("shortcut", Conv(in_channels, out_channels_, 1, stride));
    shortcut_norm_ = register_module("shortcut_norm", torch::nn::BatchNorm2d(out_channels_));
  }
}

torch::Tensor ResidualBlockImpl::forward(const torch::Tensor& inputs) {
  torch::Tensor x = inputs;
  const size_t last = convs_->size() - 1;
  for (size_t i = 0; i < last; ++i) {
    x = AutocastConv2d(*convs_[i]->as<torch::nn::Conv2d>(), x);
    x = BatchNormAct(*norms_[i]->as<torch::nn::BatchNorm2d>(), x, torch::Tensor(), /*relu=*/true);
  }
  const torch::Tensor identity =
      shortcut_ ? BatchNormAct(*shortcut_norm_, AutocastConv2d(*shortcut_, inputs), torch::Tensor(),
                               /*relu=*/false)
                : inputs;
  // The last norm, the residual add and the ReLU: one pass each way where the kernels
  // apply (fused_batch_norm.h).
  x = AutocastConv2d(*convs_[last]->as<torch::nn::Conv2d>(), x);
  return BatchNormAct(*norms_[last]->as<torch::nn::BatchNorm2d>(), x, identity, /*relu=*/true);
}

int64_t ResidualBlockImpl::Macs(int64_t height, int64_t width) const {
  int64_t macs = 0;
  for (const ConvShape& s : shapes_) {
    height = OutSize(height, s.kernel, s.stride, s.kernel / 2);
    width = OutSize(width, s.kernel, s.stride, s.kernel / 2);
    macs += height * width * s.in * s.out * s.kernel * s.kernel;
  }
  // The projection runs at the block's output resolution, where the loop ends.
  if (shortcut_) macs += height * width * in_channels_ * out_channels_;
  return macs;
}

std::string ResidualBlockImpl::ScriptLines(const std::string& name) const {
  auto eps = [&](size_t i) { return norms_->ptr<torch::nn::BatchNorm2dImpl>(i)->options.eps(); };
  std::string lines =
      shortcut_ ? "    identity = " +
                      ScriptBatchNorm(ScriptConv2d("x", name + ".shortcut", stride_, 0),
                                      name + ".shortcut_norm", shortcut_norm_->options.eps()) +
                      "\n"
                : "    identity = x\n";
  const size_t last = shapes_.size() - 1;
  for (size_t i = 0; i <= last; ++i) {
    const std::string n = std::to_string(i);
    const std::string normed = ScriptBatchNorm(
        ScriptConv2d("x", name + ".convs." + n, shapes_[i].stride, shapes_[i].kernel / 2),
        name + ".norms." + n, eps(i));
    lines += i < last ? "    x = torch.relu(" + normed + ")\n"
                      : "    x = torch.relu(" + normed + " + identity)\n";
  }
  return lines;
}

ResNetImpl::ResNetImpl(const ResNetConfig& config, const std::vector<int64_t>& image,
                       int64_t num_classes) {
  const Layout layout = LayoutFor(config.depth);
  if (image.size() != 3) throw std::invalid_argument("model.resnet: needs images [C, H, W]");
  int64_t channels = image[0], height = image[1], width = image[2];
  // The ImageNet stem shrinks the image 4x before the first block; on CIFAR-sized images
  // that would leave the last stage a single pixel or less to look at.
  small_stem_ = config.small_stem.value_or(height <= 64 && width <= 64);

  int64_t macs = 0;
  const int64_t stem_kernel = small_stem_ ? 3 : 7;
  const int64_t stem_stride = small_stem_ ? 1 : 2;
  stem_ = register_module("stem", Conv(channels, 64, stem_kernel, stem_stride));
  stem_norm_ = register_module("stem_norm", torch::nn::BatchNorm2d(64));
  height = OutSize(height, stem_kernel, stem_stride, stem_kernel / 2);
  width = OutSize(width, stem_kernel, stem_stride, stem_kernel / 2);
  macs += height * width * channels * 64 * stem_kernel * stem_kernel;
  if (!small_stem_) {  // the 3x3 stride-2 max-pool: no multiply-adds, a quarter of the pixels
    height = OutSize(height, 3, 2, 1);
    width = OutSize(width, 3, 2, 1);
  }

  blocks_ = register_module("blocks", torch::nn::ModuleList());
  channels = 64;
  for (size_t stage = 0; stage < layout.blocks.size(); ++stage) {
    const int64_t stage_width = int64_t{64} << stage;
    for (int64_t b = 0; b < layout.blocks[stage]; ++b) {
      // Each stage after the first halves the resolution in its first block.
      const int64_t stride = (stage > 0 && b == 0) ? 2 : 1;
      ResidualBlock block(channels, stage_width, stride, layout.bottleneck);
      macs += block->Macs(height, width);
      height = OutSize(height, 3, stride, 1);
      width = OutSize(width, 3, stride, 1);
      channels = block->out_channels();
      blocks_->push_back(block);
    }
  }
  classifier_ = register_module("classifier", torch::nn::Linear(channels, num_classes));
  macs += channels * num_classes;
  flops_ = 6 * macs;  // 2 FLOPs per multiply-add, forward once and backward twice
}

torch::Tensor ResNetImpl::forward(const torch::Tensor& inputs) {
  torch::Tensor x =
      BatchNormAct(*stem_norm_, AutocastConv2d(*stem_, inputs), torch::Tensor(), /*relu=*/true);
  if (!small_stem_) x = MaxPool2d(x, 3, 2, 1);
  for (const auto& block : *blocks_) {
    if (checkpoint_blocks_) {
      CheckpointOptions options;
      options.preserve_rng_state = false;  // no dropout: capturable in a CUDA graph
      // Batch norm's running statistics and batch count: updated by the forward pass
      // only, not again by the recompute.
      options.restore_after_recompute = block->buffers();
      // The lambda holds the block's shared pointer: backward calls it again.
      x = CheckpointedForward(
          [block](const torch::Tensor& in) { return block->as<ResidualBlockImpl>()->forward(in); },
          x, std::move(options));
    } else {
      x = block->as<ResidualBlockImpl>()->forward(x);
    }
  }
  x = torch::adaptive_avg_pool2d(x, {1, 1}).flatten(1);
  return classifier_->forward(x);
}

void ResNetImpl::WriteExports(const std::string& dir) {
  const int64_t stem_kernel = small_stem_ ? 3 : 7;
  std::string source =
      "def forward(self, inputs):\n    x = torch.relu(" +
      ScriptBatchNorm(ScriptConv2d("inputs", "stem", small_stem_ ? 1 : 2, stem_kernel / 2),
                      "stem_norm", stem_norm_->options.eps()) +
      ")\n";
  if (!small_stem_) source += "    x = torch.max_pool2d(x, [3, 3], [2, 2], [1, 1])\n";
  for (size_t i = 0; i < blocks_->size(); ++i) {
    source += blocks_[i]->as<ResidualBlockImpl>()->ScriptLines("blocks." + std::to_string(i));
  }
  source += "    x = torch.adaptive_avg_pool2d(x, [1, 1]).flatten(1)\n";
  source += "    return torch.linear(x, " + ScriptTensor("classifier.weight") + ", " +
            ScriptTensor("classifier.bias") + ")\n";
  SaveScriptedNetwork(*this, "ResNet", source, ScriptedExportPath(dir));
}

}  // namespace stoke::worker
