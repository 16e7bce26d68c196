#include "worker/data/shard_member_dataset.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "formats/array_set.h"

namespace stoke::worker {

ShardMemberDataset::ShardMemberDataset(std::vector<data::ImageFile> samples, int64_t num_classes,
                                       Options options)
    : samples_(std::move(samples)),
      options_(std::move(options)),
      bad_(static_cast<int64_t>(samples_.size()), options_.max_bad_fraction, "samples") {
  shape_.num_classes = num_classes;
  if (options_.input == data::ShardInput::kText) {
    shape_.kind = DataShape::Kind::kVector;
    shape_.sample = {options_.text_length};
    return;
  }
  const data::SampleLayout layout = data::LayoutOfSample(options_.dtype, options_.stored_shape);
  // Three dimensions are an image to the models, as data.arrays' are.
  shape_.kind = layout.images || layout.sample.size() == 3 ? DataShape::Kind::kImage
                                                           : DataShape::Kind::kVector;
  shape_.sample = layout.sample;
  images_ = layout.images;
  channels_last_ = layout.channels_last;
}

int64_t ShardMemberDataset::RowBytes() const {
  if (options_.input == data::ShardInput::kText) {
    return options_.text_length * static_cast<int64_t>(sizeof(int32_t));
  }
  int64_t elements = 1;
  for (int64_t d : options_.stored_shape) elements *= d;
  return elements * data::ElementBytes(options_.dtype);
}

torch::Tensor ShardMemberDataset::NewInputs(int64_t n, bool pinned) const {
  std::vector<int64_t> dims = {n};
  dims.insert(dims.end(), shape_.sample.begin(), shape_.sample.end());
  const torch::ScalarType dtype =
      options_.input == data::ShardInput::kText ? torch::kInt32 : TorchType(options_.dtype);
  return torch::empty(dims, torch::TensorOptions().dtype(dtype).pinned_memory(pinned));
}

torch::Tensor ShardMemberDataset::NewTargets(int64_t n, bool pinned) const {
  return torch::empty({n}, torch::TensorOptions().dtype(torch::kInt64).pinned_memory(pinned));
}

bool ShardMemberDataset::Load(int64_t index, uint8_t* out) const {
  const data::ImageFile& sample = samples_[static_cast<size_t>(index)];
  // One buffer per loader thread, reused from sample to sample.
  thread_local std::string bytes;
  absl::Status status =
      data::ReadImageBytes(sample, options_.files, std::numeric_limits<size_t>::max(), &bytes);
  if (status.ok() && options_.input == data::ShardInput::kText) {
    auto* ids = reinterpret_cast<int32_t*>(out);
    const auto n = std::min<int64_t>(options_.text_length, static_cast<int64_t>(bytes.size()));
    for (int64_t i = 0; i < n; ++i) ids[i] = static_cast<uint8_t>(bytes[static_cast<size_t>(i)]);
    std::fill(ids + n, ids + options_.text_length, 0);
    return true;
  }
  std::string name;
  if (status.ok()) {
    name = data::DescribeImageFile(sample, options_.files);
    const auto* p = reinterpret_cast<const uint8_t*>(bytes.data());
    auto header = data::ReadNpyHeader(name, p, bytes.size());
    if (header.ok() &&
        (header->dtype != options_.dtype || header->shape != options_.stored_shape)) {
      header = absl::InvalidArgumentError(absl::StrCat(
          name, ": holds ", data::DtypeName(header->dtype), " [",
          absl::StrJoin(header->shape, ", "), "], the set's first sample ",
          data::DtypeName(options_.dtype), " [", absl::StrJoin(options_.stored_shape, ", "), "]"));
    }
    if (header.ok()) {
      const uint8_t* src = p + header->data_offset;
      if (channels_last_) {
        // [H, W, C] stored, [C, H, W] wanted: pixels are one byte each.
        const int64_t c = shape_.sample[0], plane = shape_.sample[1] * shape_.sample[2];
        for (int64_t q = 0; q < plane; ++q) {
          for (int64_t k = 0; k < c; ++k) out[k * plane + q] = src[q * c + k];
        }
      } else {
        std::memcpy(out, src, static_cast<size_t>(RowBytes()));
      }
      return true;
    }
    status = header.status();
  }
  bad_.Record(index, sample, options_.files, status);
  return false;
}

void ShardMemberDataset::Fill(int64_t index, int64_t /*epoch*/, int64_t row, torch::Tensor& inputs,
                              torch::Tensor& targets) const {
  uint8_t* out = static_cast<uint8_t*>(inputs.data_ptr()) + row * RowBytes();
  const int64_t chosen = bad_.LoadOrReplace(
      index, options_.seed, [&](int64_t i) { return Load(i, out); },
      [&](int64_t i) {
        return data::DescribeImageFile(samples_[static_cast<size_t>(i)], options_.files);
      });
  targets.data_ptr<int64_t>()[row] = samples_[static_cast<size_t>(chosen)].label;
}

void ShardMemberDataset::ImageStatistics(int64_t samples, std::vector<double>* mean,
                                         std::vector<double>* std) const {
  PixelStatistics statistics(shape_.sample[0]);
  std::vector<uint8_t> image(static_cast<size_t>(RowBytes()));
  const int64_t count = std::min(samples, size());
  for (int64_t i = 0; i < count; ++i) {
    if (Load(i * size() / count, image.data())) {
      statistics.Add(image.data(), shape_.sample[1] * shape_.sample[2], /*interleaved=*/false);
    }
  }
  *mean = statistics.Mean();
  *std = statistics.Std();
}

}  // namespace stoke::worker
