// `batch_size: auto`: the largest batch that fits the device. Trials run one forward and
// backward pass at a batch size and report whether it fit and the memory it peaked at;
// the search doubles the batch until a trial fails (or a limit is reached), bisects
// between the last fit and the first failure, and then backs off so that the peak —
// predicted from a straight line through the measured trials — stays about 10% below the
// device's capacity (allocator fragmentation, evaluation, and the other things a long run
// allocates need the room).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "worker/common/task.h"

namespace stoke::worker {

class Network;
struct DataShape;

struct BatchTrial {
  bool fits = false;
  uint64_t peak_bytes = 0;  // when it fits
  // When it did not fit for another reason than running out of memory (cuDNN's attention,
  // for one, reports a failed workspace allocation as an execution error).
  std::string failure;
};

struct BatchSearchResult {
  int64_t batch = 0;                  // the one to train with
  int64_t largest_fitting = 0;        // the largest a trial fit
  uint64_t peak_bytes = 0;            // measured at largest_fitting
  uint64_t predicted_peak_bytes = 0;  // at batch
  int trials = 0;
  int64_t first_failing = 0;  // 0: none failed
  std::string failure;        // its error, when not out-of-memory
};

// Throws std::invalid_argument when not even a batch of 1 fits.
BatchSearchResult SearchBatchSize(const std::function<BatchTrial(int64_t)>& trial, int64_t limit,
                                  uint64_t capacity_bytes, double headroom = 0.1);

// A real trial on `device`: fake inputs of `shape` at the batch size, forward under
// autocast (when given), loss, backward; `reserve_bytes` held meanwhile stands for state
// the first optimizer step will allocate. An out-of-memory error is a failed trial, not a
// crash. On CPUs the peak is the process's peak resident memory.
BatchTrial MeasureBatch(Network& net, const DataShape& shape, const DeviceRef& device,
                        bool autocast, bool fp16, bool channels_last, int64_t batch,
                        uint64_t reserve_bytes);

// What the search may fill: device memory on GPUs; on CPUs the process's memory now plus
// half of what the machine has available.
uint64_t SearchCapacityBytes(const DeviceRef& device);

// Largest batch the search tries: the per-rank samples of an epoch, and on CPUs 1024
// (trials there are slow and the gain small).
int64_t SearchLimit(const DeviceRef& device, int64_t samples_per_rank);

// One line for the log: "batch 384 (largest that fit: 448; predicted peak 120.3 of
// 139.8 GiB, 7 trials)".
std::string DescribeSearch(const BatchSearchResult& result, uint64_t capacity_bytes);

// With an effective batch wanted: micro-steps per optimizer step and the batch per
// micro-step (<= max_batch) that make exactly `effective` samples across `world_size`
// ranks when some split does, else the nearest above.
struct AccumulationPlan {
  int64_t batch = 0;
  int64_t micro_steps = 1;
  int64_t effective = 0;  // what the plan gives
};
AccumulationPlan PlanAccumulation(int64_t effective, int64_t max_batch, int world_size);

}  // namespace stoke::worker
