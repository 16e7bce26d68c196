#include "worker/data/batch_prep.h"

#include <torch/torch.h>

#include "worker/ops/image_prep.h"

namespace stoke::worker {

BatchPrep BatchPrep::ForImages(const AugmentConfig& augment,
                               const std::vector<double>& channel_mean,
                               const std::vector<double>& channel_std, torch::Device device) {
  BatchPrep prep;
  prep.kind_ = Kind::kImages;
  prep.augment_ = augment;
  const int64_t c = static_cast<int64_t>(channel_mean.size());
  prep.mean_ = torch::tensor(channel_mean).to(torch::kFloat32).view({1, c, 1, 1}).to(device);
  prep.std_ = torch::tensor(channel_std).to(torch::kFloat32).view({1, c, 1, 1}).to(device);
  return prep;
}

BatchPrep BatchPrep::ForTokens() { return BatchPrep(); }

BatchPrep BatchPrep::ForArrays() {
  BatchPrep prep;
  prep.kind_ = Kind::kArrays;
  return prep;
}

torch::Tensor RandomCrop(const torch::Tensor& images, int64_t padding) {
  const int64_t b = images.size(0), h = images.size(2), w = images.size(3);
  const auto index = torch::TensorOptions().device(images.device()).dtype(torch::kLong);
  torch::Tensor padded = torch::constant_pad_nd(images, {padding, padding, padding, padding}, 0);
  torch::Tensor dy = torch::randint(0, 2 * padding + 1, {b, 1, 1}, index);
  torch::Tensor dx = torch::randint(0, 2 * padding + 1, {b, 1, 1}, index);
  torch::Tensor rows = dy + torch::arange(h, index).view({1, h, 1});
  torch::Tensor cols = dx + torch::arange(w, index).view({1, 1, w});
  torch::Tensor batch = torch::arange(b, index).view({b, 1, 1});
  // Gather [b, h, w] pixel positions with channels last, then back to [b, c, h, w].
  torch::Tensor cropped = padded.permute({0, 2, 3, 1}).index({batch, rows, cols});
  return cropped.permute({0, 3, 1, 2}).contiguous();
}

torch::Tensor RandomHorizontalFlip(const torch::Tensor& images) {
  torch::Tensor flip =
      torch::rand({images.size(0), 1, 1, 1}, torch::TensorOptions().device(images.device())) < 0.5;
  return torch::where(flip, images.flip({3}), images);
}

Batch BatchPrep::operator()(const torch::Tensor& inputs, const torch::Tensor& targets,
                            bool train) const {
  if (kind_ == Kind::kTokens) return Batch{inputs.to(torch::kLong), targets.to(torch::kLong)};
  if (kind_ == Kind::kArrays) {
    auto widen = [](const torch::Tensor& t) {
      return t.is_floating_point() || t.scalar_type() == torch::kUInt8 ? t.to(torch::kFloat32)
                                                                       : t.to(torch::kLong);
    };
    // Targets of a classifier are int64 already; uint8 ones never reach here.
    return Batch{widen(inputs), widen(targets)};
  }
  if (ImagePrepUsesOwnKernel(inputs) && inputs.device() == mean_.device()) {
    // Every image's crop offset and flip in one draw, then one kernel for the rest.
    const int64_t padding = train ? augment_.crop_padding : 0;
    const bool flip = train && augment_.horizontal_flip;
    const torch::Tensor draws =
        padding > 0 || flip ? DrawCropsAndFlips(inputs.size(0), padding, flip, inputs.device())
                            : torch::Tensor();
    const torch::Tensor none;
    return Batch{PrepareImages(inputs, draws, padding, augment_.normalize ? mean_ : none,
                               augment_.normalize ? std_ : none, channels_last_),
                 targets};
  }
  torch::Tensor x = inputs.to(torch::kFloat32).div_(255.0);
  if (train && augment_.crop_padding > 0) x = RandomCrop(x, augment_.crop_padding);
  if (train && augment_.horizontal_flip) x = RandomHorizontalFlip(x);
  if (augment_.normalize) x = (x - mean_) / std_;
  return Batch{x, targets};
}

}  // namespace stoke::worker
