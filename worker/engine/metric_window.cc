#include "worker/engine/metric_window.h"

#include <torch/torch.h>

#include "worker/runtime/device_timer.h"

namespace stoke::worker {

MetricWindow::MetricWindow(torch::Device device, int64_t samples_per_step, uint64_t total_steps,
                           uint64_t first_step_done)
    : device_(device),
      samples_per_step_(samples_per_step),
      total_steps_(total_steps),
      loss_sum_(torch::zeros({}, torch::TensorOptions().device(device).dtype(torch::kFloat32))),
      last_window_step_(first_step_done),
      last_window_end_(std::chrono::steady_clock::now()),
      start_marker_(DeviceTimer::Record(device)) {
  origin_marker_ = DeviceTimer::Record(device);
}

MetricWindow::~MetricWindow() = default;

void MetricWindow::AddLoss(const torch::Tensor& loss) {
  loss_sum_.add_(loss.detach().to(torch::kFloat32));
  ++terms_;
}

void MetricWindow::EndWindow(uint64_t step, uint32_t epoch, double learning_rate,
                             double data_wait_seconds, double comm_wait_seconds) {
  if (terms_ == 0 || step <= last_window_step_) return;
  Pending pending;
  torch::Tensor mean = loss_sum_ / static_cast<double>(terms_);
  if (device_.is_cuda()) {
    pending.host_loss =
        torch::empty({}, torch::TensorOptions().dtype(torch::kFloat32).pinned_memory(true));
    pending.host_loss.copy_(mean, /*non_blocking=*/true);
  } else {
    pending.host_loss = mean;
  }
  if (skipped_steps_.defined()) {
    const torch::Tensor state = torch::stack({skipped_steps_.reshape({}).to(torch::kFloat64),
                                              loss_scale_.reshape({}).to(torch::kFloat64)});
    if (device_.is_cuda()) {
      pending.host_scale_state =
          torch::empty({2}, torch::TensorOptions().dtype(torch::kFloat64).pinned_memory(true));
      pending.host_scale_state.copy_(state, /*non_blocking=*/true);
    } else {
      pending.host_scale_state = state;
    }
  }
  loss_sum_.zero_();
  pending.marker = DeviceTimer::Record(device_);
  pending.step = step;
  pending.steps_in_window = step - last_window_step_;
  pending.epoch = epoch;
  pending.learning_rate = learning_rate;
  // Host wall time, like the wait it is compared with.
  const auto now = std::chrono::steady_clock::now();
  const double wall = std::chrono::duration<double>(now - last_window_end_).count();
  last_window_end_ = now;
  pending.data_wait_ratio = wall > 0 ? std::min(1.0, data_wait_seconds / wall) : 0;
  pending.comm_wait_seconds = comm_wait_seconds;
  pending_.push_back(std::move(pending));
  terms_ = 0;
  last_window_step_ = step;
}

std::optional<MetricSample> MetricWindow::Complete(Pending& pending) {
  MetricSample sample;
  sample.step = pending.step;
  sample.total_steps = total_steps_;
  sample.epoch = pending.epoch;
  sample.learning_rate = pending.learning_rate;
  sample.data_wait_ratio = pending.data_wait_ratio;
  sample.loss = pending.host_loss.item<float>();  // the copy has landed: no sync
  const double seconds = pending.marker->SecondsSince(*start_marker_);
  sample.samples_per_second =
      seconds > 0 ? static_cast<double>(pending.steps_in_window * samples_per_step_) / seconds : 0;
  sample.step_seconds = seconds / static_cast<double>(pending.steps_in_window);
  sample.comm_wait_ratio = seconds > 0 ? std::min(1.0, pending.comm_wait_seconds / seconds) : 0;
  sample.elapsed_seconds = pending.marker->SecondsSince(*origin_marker_);
  sample.tokens_per_second =
      sample.samples_per_second * static_cast<double>(facts_.tokens_per_sample);
  sample.achieved_flops = sample.samples_per_second * static_cast<double>(facts_.flops_per_sample) /
                          std::max(1, facts_.world_size);
  sample.mfu = facts_.peak_flops > 0 ? sample.achieved_flops / facts_.peak_flops : 0;
  if (pending.host_scale_state.defined()) {
    const double* state = pending.host_scale_state.data_ptr<double>();
    sample.skipped_steps = static_cast<uint64_t>(state[0]);
    sample.loss_scale = state[1];
  }
  if (annotate_) annotate_(sample);
  start_marker_ = std::move(pending.marker);
  return sample;
}

std::optional<MetricSample> MetricWindow::Poll() {
  if (pending_.empty() || !pending_.front().marker->Ready()) return std::nullopt;
  auto sample = Complete(pending_.front());
  pending_.pop_front();
  return sample;
}

std::optional<MetricSample> MetricWindow::PollBlocking() {
  if (pending_.empty()) return std::nullopt;
  pending_.front().marker->Wait();
  return Poll();
}

}  // namespace stoke::worker
