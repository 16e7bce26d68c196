// The held-out data a job is evaluated on: batches in a fixed order, prepared like the
// training batches but never augmented.
#pragma once

#include <memory>
#include <vector>

#include "worker/data/batch_prep.h"
#include "worker/data/batch_source.h"
#include "worker/data/dataset.h"

namespace stoke::worker {

class EvalSet {
 public:
  virtual ~EvalSet() = default;
  virtual int64_t batches() const = 0;
  // Batch `index`, on the training device.
  virtual Batch Get(int64_t index) = 0;
};

// Consecutive samples of a data set; the last batch may be short, so every sample counts.
class DatasetEval final : public EvalSet {
 public:
  // max_batches 0: the whole data set.
  DatasetEval(std::shared_ptr<const Dataset> dataset, BatchPrep prep, int64_t batch_size,
              int64_t max_batches, torch::Device device);
  int64_t batches() const override { return batches_; }
  Batch Get(int64_t index) override;

 private:
  std::shared_ptr<const Dataset> dataset_;
  BatchPrep prep_;
  int64_t batch_size_;
  int64_t batches_;
  torch::Device device_;
};

// Batches drawn once, up front, from a synthetic source.
class FixedEval final : public EvalSet {
 public:
  FixedEval(BatchSource& source, int64_t batches);
  int64_t batches() const override { return static_cast<int64_t>(batches_.size()); }
  Batch Get(int64_t index) override { return batches_[static_cast<size_t>(index)]; }

 private:
  std::vector<Batch> batches_;
};

}  // namespace stoke::worker
