#include "worker/data/image_file_dataset.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "worker/data/image_transform.h"

namespace stoke::worker {

ImageFileDataset::ImageFileDataset(std::vector<data::ImageFile> files, int64_t num_classes,
                                   Options options)
    : files_(std::move(files)),
      num_classes_(num_classes),
      options_(std::move(options)),
      bad_(static_cast<int64_t>(files_.size()), options_.max_bad_fraction, "images") {}

DataShape ImageFileDataset::Shape() const {
  return DataShape{DataShape::Kind::kImage,
                   {options_.channels, options_.size, options_.size},
                   num_classes_,
                   0,
                   {}};
}

torch::Tensor ImageFileDataset::NewInputs(int64_t n, bool pinned) const {
  return torch::empty({n, options_.channels, options_.size, options_.size},
                      torch::TensorOptions().dtype(torch::kUInt8).pinned_memory(pinned));
}

torch::Tensor ImageFileDataset::NewTargets(int64_t n, bool pinned) const {
  return torch::empty({n}, torch::TensorOptions().dtype(torch::kInt64).pinned_memory(pinned));
}

bool ImageFileDataset::Load(int64_t index, int64_t epoch, bool train, uint8_t* out) const {
  const data::ImageFile& file = files_[static_cast<size_t>(index)];
  // Buffers per loader thread, reused from image to image.
  thread_local std::string bytes;
  absl::Status status =
      data::ReadImageBytes(file, options_.files, std::numeric_limits<size_t>::max(), &bytes);
  const auto* encoded = reinterpret_cast<const uint8_t*>(bytes.data());
  if (status.ok()) {
    auto size = data::ReadImageSize(encoded, bytes.size());
    if (size.ok()) {
      const data::ImageRegion region =
          train ? RandomResizedCrop(size->width, size->height, options_.min_crop_area,
                                    MixSeed(options_.seed, static_cast<uint64_t>(epoch),
                                            static_cast<uint64_t>(index)))
                : CentreCrop(size->width, size->height);
      auto decoded = data::DecodeImageRegion(encoded, bytes.size(), options_.channels, region,
                                             static_cast<int>(options_.size));
      if (decoded.ok()) {
        ResizeToChw(*decoded, static_cast<int>(options_.size), out);
        return true;
      }
      status = decoded.status();
    } else {
      status = size.status();
    }
  }
  bad_.Record(index, file, options_.files, status);
  return false;
}

void ImageFileDataset::Fill(int64_t index, int64_t epoch, int64_t row, torch::Tensor& inputs,
                            torch::Tensor& targets) const {
  const int64_t pixels = options_.channels * options_.size * options_.size;
  uint8_t* out = inputs.data_ptr<uint8_t>() + row * pixels;
  // A bad file's row takes the image (and label) of another, drawn from the sample's seed.
  const int64_t chosen = bad_.LoadOrReplace(
      index, options_.seed, [&](int64_t i) { return Load(i, epoch, options_.train, out); },
      [&](int64_t i) {
        return data::DescribeImageFile(files_[static_cast<size_t>(i)], options_.files);
      });
  targets.data_ptr<int64_t>()[row] = files_[static_cast<size_t>(chosen)].label;
}

void ImageFileDataset::Statistics(int64_t samples, std::vector<double>* mean,
                                  std::vector<double>* std) const {
  const int64_t plane = options_.size * options_.size;
  PixelStatistics statistics(options_.channels);
  std::vector<uint8_t> image(static_cast<size_t>(options_.channels * plane));
  const int64_t count = std::min(samples, size());
  for (int64_t i = 0; i < count; ++i) {
    if (Load(i * size() / count, 0, /*train=*/false, image.data())) {
      statistics.Add(image.data(), plane, /*interleaved=*/false);
    }
  }
  *mean = statistics.Mean();
  *std = statistics.Std();
}

}  // namespace stoke::worker
