// Data sets held in host memory (or mapped), read by sample index into host batch
// tensors. Samples stay in their compact stored form (uint8 pixels, int32 token ids):
// widening to float or int64 happens on the training device, after the copy.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "formats/array_file.h"
#include "formats/image_set.h"
#include "formats/token_file.h"
#include "worker/common/data_shape.h"

namespace stoke::worker {

// Per-channel mean and standard deviation of uint8 pixels, scaled to [0, 1], for the
// normalization of image batches; images are added one at a time.
class PixelStatistics {
 public:
  explicit PixelStatistics(int64_t channels);
  // One image of `plane` pixels a channel: channels first ([C, H, W]), or interleaved
  // ([H, W, C]).
  void Add(const uint8_t* pixels, int64_t plane, bool interleaved);
  std::vector<double> Mean() const;
  std::vector<double> Std() const;

 private:
  std::vector<double> sums_;
  std::vector<double> squares_;
  int64_t pixels_ = 0;  // per channel
};

// The torch dtype holding an array's elements as stored.
torch::ScalarType TorchType(data::ArrayDtype dtype);

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  virtual DataShape Shape() const = 0;
  // Empty host tensors for a batch of n samples (page-locked when `pinned`).
  virtual torch::Tensor NewInputs(int64_t n, bool pinned) const = 0;
  virtual torch::Tensor NewTargets(int64_t n, bool pinned) const = 0;
  // Writes sample `index` of `epoch` into row `row` of the batch tensors. Called from
  // several loader threads at once, on different rows.
  virtual void Fill(int64_t index, int64_t epoch, int64_t row, torch::Tensor& inputs,
                    torch::Tensor& targets) const = 0;
  // Samples skipped so far because their file could not be read (a damaged image).
  virtual int64_t SkippedSamples() const { return 0; }
};

// Labelled images: uint8 [n, C, H, W] inputs, int64 [n] class targets.
class ImageDataset final : public Dataset {
 public:
  explicit ImageDataset(data::ImageSet images);
  int64_t size() const override { return images_.count; }
  DataShape Shape() const override;
  torch::Tensor NewInputs(int64_t n, bool pinned) const override;
  torch::Tensor NewTargets(int64_t n, bool pinned) const override;
  void Fill(int64_t index, int64_t epoch, int64_t row, torch::Tensor& inputs,
            torch::Tensor& targets) const override;
  // Per-channel mean and standard deviation of the pixels, scaled to [0, 1].
  std::vector<double> ChannelMean() const { return mean_; }
  std::vector<double> ChannelStd() const { return std_; }

 private:
  data::ImageSet images_;
  std::vector<double> mean_;
  std::vector<double> std_;
};

// Windows of a token file: the input is `context` tokens, the target the same window
// shifted by one. Sample i of an epoch starts at begin + i*context + a shift drawn per
// epoch, so windows tile the data without overlap yet fall differently every epoch.
class TokenDataset final : public Dataset {
 public:
  // Tokens [begin, end) of the file; throws std::invalid_argument when too few.
  TokenDataset(std::shared_ptr<const data::TokenFile> file, int64_t begin, int64_t end,
               int64_t context, int64_t vocab_size, uint64_t seed);
  int64_t size() const override { return windows_; }
  DataShape Shape() const override;
  torch::Tensor NewInputs(int64_t n, bool pinned) const override;
  torch::Tensor NewTargets(int64_t n, bool pinned) const override;
  void Fill(int64_t index, int64_t epoch, int64_t row, torch::Tensor& inputs,
            torch::Tensor& targets) const override;

 private:
  std::shared_ptr<const data::TokenFile> file_;
  int64_t begin_;
  int64_t context_;
  int64_t vocab_size_;
  uint64_t seed_;
  int64_t windows_;
};

// Rows of memory-mapped arrays (formats/array_set.h), read only where a batch takes them:
// inputs in their stored dtype (image pixels as uint8 [n, C, H, W], transposed from
// [H, W, C] where stored so), integer targets widened to int64, floating ones as stored
// ([n, 1] for targets of shape [N]).
class ArrayDataset final : public Dataset {
 public:
  // Rows [begin, end) of `inputs` and `targets`; `shape` as the set describes them.
  ArrayDataset(std::shared_ptr<const data::ArrayFile> inputs,
               std::shared_ptr<const data::ArrayFile> targets, int64_t begin, int64_t end,
               DataShape shape, bool channels_last);
  int64_t size() const override { return end_ - begin_; }
  DataShape Shape() const override { return shape_; }
  torch::Tensor NewInputs(int64_t n, bool pinned) const override;
  torch::Tensor NewTargets(int64_t n, bool pinned) const override;
  void Fill(int64_t index, int64_t epoch, int64_t row, torch::Tensor& inputs,
            torch::Tensor& targets) const override;
  // Image pixels' per-channel mean and standard deviation, scaled to [0, 1], from at most
  // `samples` rows spread over the set: reading every row of a large array would bring
  // all of it into memory.
  void ImageStatistics(int64_t samples, std::vector<double>* mean, std::vector<double>* std) const;

 private:
  std::shared_ptr<const data::ArrayFile> inputs_;
  std::shared_ptr<const data::ArrayFile> targets_;
  int64_t begin_;
  int64_t end_;
  DataShape shape_;
  bool channels_last_;
};

}  // namespace stoke::worker
