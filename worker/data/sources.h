// Opens a job's data: the training batch source and the held-out evaluation set, from
// the data spec, on the training device.
#pragma once

#include <atomic>
#include <memory>

#include "worker/common/task.h"
#include "worker/data/batch_source.h"
#include "worker/data/eval_set.h"

namespace stoke::worker {

struct DataPipeline {
  std::unique_ptr<BatchSource> train;
  std::unique_ptr<EvalSet> eval;
};

// `start_batch`: the first training batch to produce (non-zero when resuming). Throws, naming
// the field or file, StatusError (a reader's code) or std::invalid_argument (a bad spec).
// Files are opened beneath task.data_roots (when set), re-checked as they are opened.
// Long reads look at `cancel` between pieces and stop (StatusError, CANCELLED) once set.
DataPipeline OpenData(const TrainTask& task, torch::Device device, int64_t start_batch,
                      const std::atomic<bool>* cancel = nullptr);

}  // namespace stoke::worker
