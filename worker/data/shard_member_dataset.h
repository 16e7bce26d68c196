// Samples of data.shards whose inputs are NumPy arrays (.npy) or texts (.txt), each read
// from its member of a shard as batches take it. Arrays: every sample the dtype and shape
// of the set's first, written as stored (uint8 images transposed to [C, H, W] where stored
// [H, W, C]). Texts: the UTF-8 bytes as int32 ids, the first text_length of them, zero
// after the text's end (NUL is no character of any text), so that a model embeds them. A
// member that cannot be read, or an array of another dtype or shape, is skipped and
// counted as a bad image file is (bad_samples.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "formats/array_file.h"
#include "formats/image_files.h"
#include "formats/read_options.h"
#include "formats/shard_files.h"
#include "worker/data/bad_samples.h"
#include "worker/data/dataset.h"

namespace stoke::worker {

class ShardMemberDataset final : public Dataset {
 public:
  struct Options {
    data::ShardInput input = data::ShardInput::kArray;  // kArray or kText
    // Arrays: the first sample's header.
    data::ArrayDtype dtype = data::ArrayDtype::kFloat32;
    std::vector<int64_t> stored_shape;
    // Texts: the ids each sample holds.
    int64_t text_length = 256;
    uint64_t seed = 1;
    double max_bad_fraction = 0.001;
    data::ReadOptions files;
  };
  ShardMemberDataset(std::vector<data::ImageFile> samples, int64_t num_classes, Options options);

  int64_t size() const override { return static_cast<int64_t>(samples_.size()); }
  DataShape Shape() const override { return shape_; }
  torch::Tensor NewInputs(int64_t n, bool pinned) const override;
  torch::Tensor NewTargets(int64_t n, bool pinned) const override;
  void Fill(int64_t index, int64_t epoch, int64_t row, torch::Tensor& inputs,
            torch::Tensor& targets) const override;
  int64_t SkippedSamples() const override { return bad_.skipped(); }

  // Whether the arrays are uint8 images (normalized on the device as images are).
  bool images() const { return images_; }
  // Images' per-channel mean and standard deviation, scaled to [0, 1], from at most
  // `samples` samples spread over the set.
  void ImageStatistics(int64_t samples, std::vector<double>* mean, std::vector<double>* std) const;

 private:
  // Writes sample `index`'s input into `out` (one row of the batch's inputs); false
  // (recorded) when it is bad.
  bool Load(int64_t index, uint8_t* out) const;
  int64_t RowBytes() const;

  std::vector<data::ImageFile> samples_;
  Options options_;
  DataShape shape_;
  bool images_ = false;
  bool channels_last_ = false;
  mutable BadSamples bad_;
};

}  // namespace stoke::worker
