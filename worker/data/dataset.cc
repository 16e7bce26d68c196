#include "worker/data/dataset.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>

namespace stoke::worker {
namespace {

torch::TensorOptions Host(torch::ScalarType dtype, bool pinned) {
  return torch::TensorOptions().dtype(dtype).pinned_memory(pinned);
}

template <typename T>
void WidenRow(const uint8_t* src, int64_t n, int64_t* dst) {
  for (int64_t i = 0; i < n; ++i) {
    T v;
    std::memcpy(&v, src + i * static_cast<int64_t>(sizeof(T)), sizeof(T));
    dst[i] = v;
  }
}

}  // namespace

torch::ScalarType TorchType(data::ArrayDtype dtype) {
  switch (dtype) {
    case data::ArrayDtype::kUInt8:
      return torch::kUInt8;
    case data::ArrayDtype::kInt32:
      return torch::kInt32;
    case data::ArrayDtype::kInt64:
      return torch::kInt64;
    case data::ArrayDtype::kFloat16:
      return torch::kHalf;
    case data::ArrayDtype::kBFloat16:
      return torch::kBFloat16;
    case data::ArrayDtype::kFloat32:
      return torch::kFloat32;
  }
  return torch::kUInt8;
}

PixelStatistics::PixelStatistics(int64_t channels)
    : sums_(static_cast<size_t>(channels)), squares_(static_cast<size_t>(channels)) {}

void PixelStatistics::Add(const uint8_t* pixels, int64_t plane, bool interleaved) {
  const int64_t c = static_cast<int64_t>(sums_.size());
  for (int64_t k = 0; k < plane * c; ++k) {
    const size_t channel = static_cast<size_t>(interleaved ? k % c : k / plane);
    sums_[channel] += pixels[k];
    squares_[channel] += static_cast<double>(pixels[k]) * pixels[k];
  }
  pixels_ += plane;
}

std::vector<double> PixelStatistics::Mean() const {
  std::vector<double> mean;
  const double n = static_cast<double>(std::max<int64_t>(pixels_, 1));
  for (double sum : sums_) mean.push_back(sum / n / 255.0);
  return mean;
}

std::vector<double> PixelStatistics::Std() const {
  std::vector<double> std;
  const double n = static_cast<double>(std::max<int64_t>(pixels_, 1));
  for (size_t k = 0; k < sums_.size(); ++k) {
    const double m = sums_[k] / n;
    std.push_back(std::sqrt(std::max(squares_[k] / n - m * m, 1e-6)) / 255.0);
  }
  return std;
}

ImageDataset::ImageDataset(data::ImageSet images) : images_(std::move(images)) {
  // Statistics for normalization, from the data itself rather than a table of known sets.
  PixelStatistics statistics(images_.channels);
  const int64_t plane = images_.height * images_.width;
  for (int64_t i = 0; i < images_.count; ++i) {
    statistics.Add(images_.pixels.data() + i * images_.sample_bytes(), plane,
                   /*interleaved=*/false);
  }
  mean_ = statistics.Mean();
  std_ = statistics.Std();
}

DataShape ImageDataset::Shape() const {
  return DataShape{DataShape::Kind::kImage,
                   {images_.channels, images_.height, images_.width},
                   images_.num_classes,
                   0,
                   {}};
}

torch::Tensor ImageDataset::NewInputs(int64_t n, bool pinned) const {
  return torch::empty({n, images_.channels, images_.height, images_.width},
                      Host(torch::kUInt8, pinned));
}

torch::Tensor ImageDataset::NewTargets(int64_t n, bool pinned) const {
  return torch::empty({n}, Host(torch::kInt64, pinned));
}

void ImageDataset::Fill(int64_t index, int64_t /*epoch*/, int64_t row, torch::Tensor& inputs,
                        torch::Tensor& targets) const {
  const int64_t bytes = images_.sample_bytes();
  std::memcpy(inputs.data_ptr<uint8_t>() + row * bytes, images_.pixels.data() + index * bytes,
              static_cast<size_t>(bytes));
  targets.data_ptr<int64_t>()[row] = images_.labels[static_cast<size_t>(index)];
}

TokenDataset::TokenDataset(std::shared_ptr<const data::TokenFile> file, int64_t begin, int64_t end,
                           int64_t context, int64_t vocab_size, uint64_t seed)
    : file_(std::move(file)),
      begin_(begin),
      context_(context),
      vocab_size_(vocab_size),
      seed_(seed) {
  // Room for the per-epoch shift (< context) and the one-token lookahead of the target.
  windows_ = (end - begin - context) / context;
  if (windows_ < 1) {
    throw std::invalid_argument(file_->path() + ": " + std::to_string(end - begin) +
                                " tokens are too few for one window of context " +
                                std::to_string(context) + " (data.tokens.context)");
  }
}

DataShape TokenDataset::Shape() const {
  return DataShape{DataShape::Kind::kTokens, {context_}, 0, vocab_size_, {}};
}

torch::Tensor TokenDataset::NewInputs(int64_t n, bool pinned) const {
  return torch::empty({n, context_}, Host(torch::kInt32, pinned));
}

torch::Tensor TokenDataset::NewTargets(int64_t n, bool pinned) const {
  return torch::empty({n, context_}, Host(torch::kInt32, pinned));
}

void TokenDataset::Fill(int64_t index, int64_t epoch, int64_t row, torch::Tensor& inputs,
                        torch::Tensor& targets) const {
  // A cheap integer hash of (seed, epoch) picks the epoch's shift.
  uint64_t h =
      seed_ * 0x9E3779B97F4A7C15ull ^ static_cast<uint64_t>(epoch + 1) * 0xBF58476D1CE4E5B9ull;
  h ^= h >> 31;
  const int64_t shift = static_cast<int64_t>(h % static_cast<uint64_t>(context_));
  const uint16_t* src = file_->tokens() + begin_ + index * context_ + shift;
  int32_t* in = inputs.data_ptr<int32_t>() + row * context_;
  int32_t* tg = targets.data_ptr<int32_t>() + row * context_;
  for (int64_t t = 0; t < context_; ++t) {
    in[t] = src[t];
    tg[t] = src[t + 1];
  }
}

ArrayDataset::ArrayDataset(std::shared_ptr<const data::ArrayFile> inputs,
                           std::shared_ptr<const data::ArrayFile> targets, int64_t begin,
                           int64_t end, DataShape shape, bool channels_last)
    : inputs_(std::move(inputs)),
      targets_(std::move(targets)),
      begin_(begin),
      end_(end),
      shape_(std::move(shape)),
      channels_last_(channels_last) {}

torch::Tensor ArrayDataset::NewInputs(int64_t n, bool pinned) const {
  std::vector<int64_t> dims = {n};
  dims.insert(dims.end(), shape_.sample.begin(), shape_.sample.end());
  return torch::empty(dims, Host(TorchType(inputs_->dtype()), pinned));
}

torch::Tensor ArrayDataset::NewTargets(int64_t n, bool pinned) const {
  std::vector<int64_t> dims = {n};
  if (!shape_.regression.empty()) {
    dims.insert(dims.end(), shape_.regression.begin(), shape_.regression.end());
    return torch::empty(dims, Host(TorchType(targets_->dtype()), pinned));
  }
  const std::vector<int64_t> row = targets_->row_shape();
  dims.insert(dims.end(), row.begin(), row.end());
  return torch::empty(dims, Host(torch::kInt64, pinned));
}

void ArrayDataset::Fill(int64_t index, int64_t /*epoch*/, int64_t row, torch::Tensor& inputs,
                        torch::Tensor& targets) const {
  const int64_t at = begin_ + index;
  const int64_t in_bytes = inputs_->row_bytes();
  uint8_t* in = static_cast<uint8_t*>(inputs.data_ptr()) + row * in_bytes;
  if (channels_last_) {
    // [H, W, C] stored, [C, H, W] wanted: pixels are one byte each.
    const int64_t c = shape_.sample[0], plane = shape_.sample[1] * shape_.sample[2];
    const uint8_t* src = inputs_->row(at);
    for (int64_t p = 0; p < plane; ++p) {
      for (int64_t k = 0; k < c; ++k) in[k * plane + p] = src[p * c + k];
    }
  } else {
    std::memcpy(in, inputs_->row(at), static_cast<size_t>(in_bytes));
  }
  const int64_t target_bytes = targets_->row_bytes();
  if (!shape_.regression.empty()) {
    std::memcpy(static_cast<uint8_t*>(targets.data_ptr()) + row * target_bytes, targets_->row(at),
                static_cast<size_t>(target_bytes));
    return;
  }
  const int64_t n = target_bytes / data::ElementBytes(targets_->dtype());
  int64_t* dst = targets.data_ptr<int64_t>() + row * n;
  switch (targets_->dtype()) {
    case data::ArrayDtype::kUInt8:
      WidenRow<uint8_t>(targets_->row(at), n, dst);
      break;
    case data::ArrayDtype::kInt32:
      WidenRow<int32_t>(targets_->row(at), n, dst);
      break;
    default:
      WidenRow<int64_t>(targets_->row(at), n, dst);
      break;
  }
}

void ArrayDataset::ImageStatistics(int64_t samples, std::vector<double>* mean,
                                   std::vector<double>* std) const {
  PixelStatistics statistics(shape_.sample[0]);
  const int64_t count = std::min(samples, size());
  for (int64_t i = 0; i < count; ++i) {
    statistics.Add(inputs_->row(begin_ + i * size() / count), shape_.sample[1] * shape_.sample[2],
                   channels_last_);
  }
  *mean = statistics.Mean();
  *std = statistics.Std();
}

}  // namespace stoke::worker
