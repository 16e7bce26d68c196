#include "worker/data/image_file_dataset.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "worker/common/status_error.h"
#include "worker/data/image_transform.h"

namespace stoke::worker {
namespace {

// Files a bad sample's row tries instead before giving up on the batch.
constexpr int kReplacementTries = 16;
// Bad files named in the error that fails the job.
constexpr size_t kNamedBadFiles = 3;

}  // namespace

ImageFileDataset::ImageFileDataset(std::vector<data::ImageFile> files, int64_t num_classes,
                                   Options options)
    : files_(std::move(files)), num_classes_(num_classes), options_(std::move(options)) {}

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
  skipped_.fetch_add(1);
  std::lock_guard<std::mutex> lock(bad_mutex_);
  if (std::find(bad_files_.begin(), bad_files_.end(), index) == bad_files_.end()) {
    bad_files_.push_back(index);
    // A read's error names the file already; a decoder's does not.
    const std::string name = data::DescribeImageFile(file, options_.files);
    bad_reasons_.push_back(absl::StartsWith(status.message(), file.path)
                               ? absl::StrCat(status.message())
                               : absl::StrCat(name, ": ", status.message()));
  }
  // At least one bad file is forgiven in any set; more than the share is not.
  const double allowed =
      std::max(1.0, std::floor(options_.max_bad_fraction * static_cast<double>(size())));
  if (static_cast<double>(bad_files_.size()) > allowed) {
    std::string named;
    for (size_t i = 0; i < std::min(kNamedBadFiles, bad_reasons_.size()); ++i) {
      absl::StrAppend(&named, i ? "; " : "", bad_reasons_[i]);
    }
    ThrowIfError(absl::DataLossError(
        absl::StrCat(bad_files_.size(), " of the ", size(),
                     " images cannot be read, more than data.max_bad_fraction allows (",
                     options_.max_bad_fraction, "): ", named)));
  }
  return false;
}

void ImageFileDataset::Fill(int64_t index, int64_t epoch, int64_t row, torch::Tensor& inputs,
                            torch::Tensor& targets) const {
  const int64_t pixels = options_.channels * options_.size * options_.size;
  uint8_t* out = inputs.data_ptr<uint8_t>() + row * pixels;
  // A bad file's row takes the image (and label) of another, drawn from the sample's seed.
  int64_t chosen = index;
  for (int attempt = 0; !Load(chosen, epoch, options_.train, out); ++attempt) {
    if (attempt == kReplacementTries) {
      ThrowIfError(absl::DataLossError(absl::StrCat(
          kReplacementTries + 1, " images in a row could not be read; the first: ",
          data::DescribeImageFile(files_[static_cast<size_t>(index)], options_.files))));
    }
    chosen = static_cast<int64_t>(
        MixSeed(options_.seed, static_cast<uint64_t>(index), static_cast<uint64_t>(attempt)) %
        static_cast<uint64_t>(size()));
  }
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
