// What happens to a batch on the training device, after the copy and before the model:
// images are widened to float in [0, 1], randomly cropped and flipped (training only),
// and normalized; token ids are widened to int64. All tensor operations on the device,
// so the loader threads only move bytes. On a GPU, images take one launch of Stoke's
// kernel and one of torch::randint (worker/ops/image_prep.h) instead of ATen's ~18 small
// ones, outside the step's captured graph; elsewhere (CPU, no kernels built or allowed,
// input other than uint8) ATen's composition below.
#pragma once

#include <torch/types.h>

#include <vector>

#include "worker/common/task.h"
#include "worker/data/batch_source.h"

namespace stoke::worker {

class BatchPrep {
 public:
  static BatchPrep ForImages(const AugmentConfig& augment, const std::vector<double>& channel_mean,
                             const std::vector<double>& channel_std, torch::Device device);
  static BatchPrep ForTokens();
  // Arrays other than images: floating inputs and targets widened to float32, integer
  // ones to int64.
  static BatchPrep ForArrays();

  Batch operator()(const torch::Tensor& inputs, const torch::Tensor& targets, bool train) const;

  // The model takes its images channels-last: where Stoke's kernel prepares them it writes
  // NHWC directly, so the step's conversion to channels-last and its copy into the captured
  // graph's input are plain copies, not transposes.
  void set_channels_last(bool on) { channels_last_ = on; }

 private:
  enum class Kind { kImages, kTokens, kArrays };
  Kind kind_ = Kind::kTokens;
  AugmentConfig augment_;
  // [1, C, 1, 1] on the device, made once: building them per batch would copy from the
  // host, and a copy from pageable memory waits for the device.
  torch::Tensor mean_;
  torch::Tensor std_;
  bool channels_last_ = false;
};

// Zero-pads each image by `padding` pixels per side and crops it back to its size at a
// random offset per sample.
torch::Tensor RandomCrop(const torch::Tensor& images, int64_t padding);
// Mirrors each image left-right with probability 1/2.
torch::Tensor RandomHorizontalFlip(const torch::Tensor& images);

}  // namespace stoke::worker
