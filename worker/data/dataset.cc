#include "worker/data/dataset.h"

#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

namespace stoke::worker {
namespace {

torch::TensorOptions Host(torch::ScalarType dtype, bool pinned) {
  return torch::TensorOptions().dtype(dtype).pinned_memory(pinned);
}

}  // namespace

ImageDataset::ImageDataset(data::ImageSet images) : images_(std::move(images)) {
  // Statistics for normalization, from the data itself rather than a table of known sets.
  const int64_t plane = images_.height * images_.width;
  for (int64_t c = 0; c < images_.channels; ++c) {
    double sum = 0, sum_sq = 0;
    for (int64_t i = 0; i < images_.count; ++i) {
      const uint8_t* p = images_.pixels.data() + (i * images_.channels + c) * plane;
      for (int64_t k = 0; k < plane; ++k) {
        sum += p[k];
        sum_sq += static_cast<double>(p[k]) * p[k];
      }
    }
    const double n = static_cast<double>(images_.count * plane);
    const double mean = sum / n;
    mean_.push_back(mean / 255.0);
    std_.push_back(std::sqrt(std::max(sum_sq / n - mean * mean, 1e-6)) / 255.0);
  }
}

DataShape ImageDataset::Shape() const {
  return DataShape{DataShape::Kind::kImage,
                   {images_.channels, images_.height, images_.width},
                   images_.num_classes,
                   0};
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
  return DataShape{DataShape::Kind::kTokens, {context_}, 0, vocab_size_};
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

}  // namespace stoke::worker
