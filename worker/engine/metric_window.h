// Training metrics gathered without stalling the GPU. Each step adds its loss to a sum
// that lives on the device; every metrics interval the mean is copied to pinned host
// memory with a non-blocking copy and an event is recorded behind it. The host reads the
// value only once the event has completed (Poll), so the hot loop never waits for the
// GPU. Throughput comes from the time between the events of consecutive windows, which
// measures the GPU's work rather than how far ahead the host ran.
#pragma once

#include <torch/types.h>

#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <optional>

#include "worker/common/task.h"

namespace stoke::worker {

class DeviceTimer;

class MetricWindow {
 public:
  // samples_per_step: samples consumed by one optimizer step (all micro-batches, all
  // ranks). first_step_done: the step training resumes after (0 for a fresh start).
  MetricWindow(torch::Device device, int64_t samples_per_step, uint64_t total_steps,
               uint64_t first_step_done = 0);

  // What turns throughput into model FLOP/s, MFU and tokens/s. world_size: ranks sharing
  // samples_per_step; peak_flops: the device's (0: MFU unknown).
  struct ModelFacts {
    int64_t flops_per_sample = 0;
    int64_t tokens_per_sample = 0;
    int world_size = 1;
    double peak_flops = 0;
  };
  void SetModelFacts(const ModelFacts& facts) { facts_ = facts; }
  // Called as each sample completes, for what the host reads without waiting (allocator
  // counters).
  void SetAnnotator(std::function<void(MetricSample&)> annotate) {
    annotate_ = std::move(annotate);
  }
  // fp16: device scalars of the steps skipped so far and the loss scale, copied out with
  // each window's loss.
  void TrackLossScale(torch::Tensor skipped_steps, torch::Tensor scale) {
    skipped_steps_ = std::move(skipped_steps);
    loss_scale_ = std::move(scale);
  }
  ~MetricWindow();

  // Adds one loss term (a 0-d tensor on the device): one per micro-batch. The window's
  // loss is the mean of its terms.
  void AddLoss(const torch::Tensor& loss);
  // Closes the window that ends at optimizer step `step` and starts the next.
  // data_wait_seconds: how long the loop waited for batches during the window (host
  // time); comm_wait_seconds: how long the device waited for gradient reductions.
  void EndWindow(uint64_t step, uint32_t epoch, double learning_rate, double data_wait_seconds,
                 double comm_wait_seconds = 0);
  // The oldest closed window whose values have reached the host, if any.
  std::optional<MetricSample> Poll();
  // Waits for every closed window (end of training only).
  std::optional<MetricSample> PollBlocking();

 private:
  struct Pending {
    torch::Tensor host_loss;         // pinned on CUDA
    torch::Tensor host_scale_state;  // fp16: [skipped steps, scale], pinned on CUDA
    std::unique_ptr<DeviceTimer> marker;
    uint64_t step;
    uint64_t steps_in_window;
    uint32_t epoch;
    double learning_rate;
    double data_wait_ratio;
    double comm_wait_seconds;
  };
  std::optional<MetricSample> Complete(Pending& pending);

  torch::Device device_;
  ModelFacts facts_;
  std::function<void(MetricSample&)> annotate_;
  int64_t samples_per_step_;
  uint64_t total_steps_;
  torch::Tensor loss_sum_;
  torch::Tensor skipped_steps_;
  torch::Tensor loss_scale_;
  uint64_t terms_ = 0;
  uint64_t last_window_step_ = 0;
  std::chrono::steady_clock::time_point last_window_end_;  // host time
  std::deque<Pending> pending_;
  std::unique_ptr<DeviceTimer> start_marker_;   // the end of the previous window
  std::unique_ptr<DeviceTimer> origin_marker_;  // the start of training
};

}  // namespace stoke::worker
