// Synthetic classification data made on the training device: Gaussian inputs, labelled
// by a fixed random linear "teacher" (the argmax of x·W). The task is learnable, so the
// loss falls as it would on real data, while no byte crosses the host-device link.
#pragma once

#include "worker/common/task.h"
#include "worker/data/batch_source.h"

namespace stoke::worker {

class SyntheticSource final : public BatchSource {
 public:
  SyntheticSource(const SyntheticDataConfig& config, torch::Device device, int64_t batch_size,
                  uint64_t seed);
  Batch Next() override;
  int64_t SamplesPerEpoch() const override { return config_.samples_per_epoch; }
  DataShape Shape() const override {
    return DataShape{DataShape::Kind::kVector, {config_.features}, config_.num_classes, 0};
  }

 private:
  SyntheticDataConfig config_;
  torch::Device device_;
  int64_t batch_size_;
  torch::Tensor teacher_;  // [features, num_classes]
};

}  // namespace stoke::worker
