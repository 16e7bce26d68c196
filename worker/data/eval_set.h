// The held-out data a job is evaluated on: batches in a fixed order, prepared like the
// training batches but never augmented.
#pragma once

#include <memory>
#include <vector>

#include "worker/data/batch_prep.h"
#include "worker/data/batch_source.h"
#include "worker/data/dataset.h"
#include "worker/data/synthetic.h"

namespace stoke::worker {

class EvalSet {
 public:
  virtual ~EvalSet() = default;
  virtual int64_t batches() const = 0;
  // Batch `index`, on the training device.
  virtual Batch Get(int64_t index) = 0;
  // As BatchSource::SetImagesChannelsLast.
  virtual void SetImagesChannelsLast(bool /*on*/) {}
};

// Consecutive samples of a data set; the last batch may be short, so every sample counts.
class DatasetEval final : public EvalSet {
 public:
  // max_batches 0: the whole data set.
  DatasetEval(std::shared_ptr<const Dataset> dataset, BatchPrep prep, int64_t batch_size,
              int64_t max_batches, torch::Device device);
  int64_t batches() const override { return batches_; }
  Batch Get(int64_t index) override;
  void SetImagesChannelsLast(bool on) override { prep_.set_channels_last(on); }

 private:
  std::shared_ptr<const Dataset> dataset_;
  BatchPrep prep_;
  int64_t batch_size_;
  int64_t batches_;
  torch::Device device_;
};

// A synthetic source's held-out batches, each drawn when asked for (the same ones every
// pass): nothing is drawn up front, so a large eval.batches costs neither time before
// training nor memory.
class SyntheticEval final : public EvalSet {
 public:
  SyntheticEval(const SyntheticSource& source, int64_t batches)
      : source_(source), batches_(batches) {}
  int64_t batches() const override { return batches_; }
  Batch Get(int64_t index) override { return source_.HeldOut(index); }

 private:
  const SyntheticSource source_;  // a copy: the rule, not the training draws
  int64_t batches_;
};

}  // namespace stoke::worker
