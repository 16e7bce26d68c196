#include "worker/data/eval_set.h"

#include <algorithm>

namespace stoke::worker {

DatasetEval::DatasetEval(std::shared_ptr<const Dataset> dataset, BatchPrep prep, int64_t batch_size,
                         int64_t max_batches, torch::Device device)
    : dataset_(std::move(dataset)),
      prep_(std::move(prep)),
      batch_size_(batch_size),
      device_(device) {
  batches_ = (dataset_->size() + batch_size_ - 1) / batch_size_;
  if (max_batches > 0) batches_ = std::min(batches_, max_batches);
}

Batch DatasetEval::Get(int64_t index) {
  const int64_t first = index * batch_size_;
  const int64_t n = std::min(batch_size_, dataset_->size() - first);
  torch::Tensor inputs = dataset_->NewInputs(n, /*pinned=*/false);
  torch::Tensor targets = dataset_->NewTargets(n, /*pinned=*/false);
  for (int64_t row = 0; row < n; ++row)
    dataset_->Fill(first + row, /*epoch=*/0, row, inputs, targets);
  // Evaluation is not the hot loop: a plain copy is fine here.
  return prep_(inputs.to(device_), targets.to(device_), /*train=*/false);
}

}  // namespace stoke::worker
