// Synthetic data made on the training device, so that a job measures pure compute: no
// byte crosses the host-device link. Three shapes: feature vectors labelled by a fixed
// random linear "teacher" (learnable, the loss falls as on real data); noise images whose
// channel means carry their class (a fixed random offset per class and channel, which a
// network's global pooling can read); token sequences that follow a fixed rule (each id a constant
// step after the previous, modulo the vocabulary), so a language model can learn them.
#pragma once

#include <algorithm>
#include <memory>
#include <mutex>

#include "worker/common/task.h"
#include "worker/data/batch_source.h"

namespace stoke::worker {

class SyntheticSource final : public BatchSource {
 public:
  // samples_per_epoch counts across all `world_size` ranks.
  SyntheticSource(const SyntheticDataConfig& config, torch::Device device, int64_t batch_size,
                  uint64_t seed, int world_size);
  Batch Next() override;
  // Batch `index` of a held-out set labelled by the same rule: drawn on the CPU from a
  // generator of its own (seeded by the job's seed and the index), so that every pass
  // sees the same batches, none is kept in memory, and training draws are untouched.
  Batch HeldOut(int64_t index) const;
  // Training images drawn in channels-last order, the one the model computes in: no
  // copy of each batch to convert it (a second batch in memory at the step's peak).
  void SetImagesChannelsLast(bool on) override { images_channels_last_ = on; }
  int64_t BatchesPerEpoch() const override {
    return std::max<int64_t>(1, config_.samples_per_epoch / (batch_size_ * world_size_));
  }
  DataShape Shape() const override;

 private:
  SyntheticDataConfig config_;
  torch::Device device_;
  int64_t batch_size_;
  int world_size_;
  // One batch drawn from `generator` on `where`; an undefined generator (at::Generator())
  // draws from the device's default one, as the training batches do.
  Batch Draw(const at::Generator& generator, torch::Device where, bool channels_last) const;

  uint64_t seed_;
  torch::Tensor teacher_;  // vectors: [features, num_classes]
  // Images: [num_classes, channels], made at the first draw (shared by copies, such as
  // the held-out set's: the same rule).
  struct LazyTable {
    std::once_flag made;
    torch::Tensor table;
  };
  const torch::Tensor& ClassOffset() const;
  std::shared_ptr<LazyTable> class_offset_ = std::make_shared<LazyTable>();
  int64_t token_step_ = 1;
  bool images_channels_last_ = false;
};

}  // namespace stoke::worker
