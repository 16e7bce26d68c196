// Opens a job's data: the training batch source and the held-out evaluation set, from
// the data spec, on the training device.
#pragma once

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
DataPipeline OpenData(const TrainTask& task, torch::Device device, int64_t start_batch);

}  // namespace stoke::worker
