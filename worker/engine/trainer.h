// Runs one rank of a training job to its end: builds the model, the data and the
// optimizer from the task, trains for the asked steps or epochs, and reports metrics
// through the observer every metrics interval. The step itself never waits for the
// device: no .item(), no host copies that block, grads reset rather than zeroed.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <vector>

#include "formats/read_options.h"
#include "worker/common/data_shape.h"
#include "worker/common/task.h"

namespace at {
class Tensor;
}

namespace stoke::worker {

class Network;

// Builds the network a task names for its data (models/model_factory.h's BuildNetwork, or
// the trainer process's, which adds Python models).
using NetworkBuilder = std::function<std::shared_ptr<Network>(const ModelConfig&, const DataShape&,
                                                              const data::ReadOptions&)>;

// What tests and benchmarks may look at as training ends.
struct TrainingProbe {
  // Called with the model's parameters (on the device) after the last step.
  std::function<void(const std::vector<at::Tensor>&)> on_finished;
  // Called before each optimizer step with its number (from 1).
  std::function<void(uint64_t step)> before_step;
  // Builds the model; unset: BuildNetwork.
  NetworkBuilder build_network;
  // Where the worker asks for a preemption (TaskStops::preempt_after), read before each
  // step: the run stops after that step, having written a checkpoint of it (rank 0).
  const std::atomic<uint64_t>* preempt_after = nullptr;
};

// Returns how the training ended. `cancel` is checked before every step. Errors from
// LibTorch (a bad shape, an out-of-memory) end as a failed outcome naming the step. With
// a job_dir, it resumes from the newest checkpoint there and writes new ones.
TrainOutcome RunTraining(const TrainTask& task, const DeviceRef& device, TrainingObserver& observer,
                         const std::atomic<bool>& cancel);
TrainOutcome RunTraining(const TrainTask& task, const DeviceRef& device, TrainingObserver& observer,
                         const std::atomic<bool>& cancel, const TrainingProbe& probe);

// Optimizer steps the task will run: its steps, or its epochs over data that gives each
// rank `batches_per_epoch` batches.
uint64_t TotalSteps(const TrainTask& task, int64_t batches_per_epoch);

}  // namespace stoke::worker
