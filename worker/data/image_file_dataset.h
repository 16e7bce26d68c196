// Images read from their files as batches take them (data.images): each decoded on a
// loader thread (formats/image_decode.h), cropped and resized there (image_transform.h),
// and written into the batch as uint8 [C, size, size]; flips and normalization follow on
// the device (BatchPrep). A file that cannot be read or decoded is skipped and counted: its
// row takes another sample's image. Past max_bad_fraction of the files, Fill throws
// (DATA_LOSS), naming the first bad files.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "formats/image_files.h"
#include "formats/read_options.h"
#include "worker/data/bad_samples.h"
#include "worker/data/dataset.h"

namespace stoke::worker {

class ImageFileDataset final : public Dataset {
 public:
  struct Options {
    int64_t size = 224;
    int channels = 3;
    bool train = true;  // random crops; false: the centre
    double min_crop_area = 0.08;
    uint64_t seed = 1;
    double max_bad_fraction = 0.001;
    data::ReadOptions files;  // the data roots each file is opened beneath
  };
  ImageFileDataset(std::vector<data::ImageFile> files, int64_t num_classes, Options options);

  int64_t size() const override { return static_cast<int64_t>(files_.size()); }
  DataShape Shape() const override;
  torch::Tensor NewInputs(int64_t n, bool pinned) const override;
  torch::Tensor NewTargets(int64_t n, bool pinned) const override;
  void Fill(int64_t index, int64_t epoch, int64_t row, torch::Tensor& inputs,
            torch::Tensor& targets) const override;
  int64_t SkippedSamples() const override { return bad_.skipped(); }

  // Per-channel mean and standard deviation of the pixels (scaled to [0, 1]) of at most
  // `samples` images spread over the set, centre-cropped.
  void Statistics(int64_t samples, std::vector<double>* mean, std::vector<double>* std) const;

 private:
  // Decodes file `index` into `out` ([C, size, size]), a random crop when `train`, else
  // the centre; false (recorded) when it is bad.
  bool Load(int64_t index, int64_t epoch, bool train, uint8_t* out) const;

  std::vector<data::ImageFile> files_;
  int64_t num_classes_;
  Options options_;
  mutable BadSamples bad_;
};

}  // namespace stoke::worker
