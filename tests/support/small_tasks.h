// Jobs small enough for a CPU test to train in a second or two.
#pragma once

#include <cstdint>

#include "worker/common/task.h"

namespace stoke::testing {

// A 16 -> 64 -> 4 MLP on learnable synthetic vectors (4096 per epoch), batch 64, AdamW
// at 3e-3, a metrics sample every 20 steps.
inline worker::TrainTask SmallMlpTask(uint64_t steps) {
  worker::TrainTask task;
  task.job_id = "1";
  task.name = "test";
  worker::MlpConfig mlp;
  mlp.input_dim = 16;
  mlp.hidden = {64};
  mlp.num_classes = 4;
  task.model = mlp;
  worker::SyntheticDataConfig data;
  data.features = 16;
  data.num_classes = 4;
  data.samples_per_epoch = 4096;
  task.data.source = data;
  task.optimizer.lr = 3e-3;
  task.training.steps = steps;
  task.training.batch_size = 64;
  task.training.metrics_interval_steps = 20;
  return task;
}

}  // namespace stoke::testing
