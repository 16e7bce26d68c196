#include "worker/engine/trainer.h"

#include <torch/torch.h>

#include <cmath>
#include <stdexcept>
#include <optional>
#include <sstream>

#include "worker/data/synthetic.h"
#include "worker/engine/devices.h"
#include "worker/engine/metric_window.h"
#include "worker/engine/optimizers.h"
#include "worker/engine/torch_compat.h"
#include "worker/engine/torch_device.h"
#include "worker/models/model_factory.h"

namespace stoke::worker {
namespace {

std::unique_ptr<BatchSource> MakeSource(const DataConfig& data, torch::Device device,
                                        int64_t batch_size, uint64_t seed) {
  if (const auto* synthetic = std::get_if<SyntheticDataConfig>(&data.source)) {
    return std::make_unique<SyntheticSource>(*synthetic, device, batch_size, seed);
  }
  throw std::invalid_argument("data: this worker reads synthetic data only so far");
}

// bf16 where asked, or where AUTO and the device does it natively at full speed; CPUs
// emulate much of bf16, so AUTO keeps them in fp32.
bool UseBf16(Precision precision, const DeviceRef& device) {
  switch (precision) {
    case Precision::kBf16:
      return true;
    case Precision::kFp32:
      return false;
    case Precision::kAuto:
      return device.kind == DeviceKind::kCuda && SupportsBf16(device);
  }
  return false;
}

std::string Describe(const TrainTask& task, Network& net, const DeviceInfo& device, bool bf16,
                     uint64_t total_steps) {
  std::ostringstream out;
  out << "training " << task.name << " on " << device.device.Label() << " (" << device.name
      << "): " << net.ParameterCount() << " parameters, batch " << task.training.batch_size;
  if (task.training.grad_accum_steps > 1)
    out << " x " << task.training.grad_accum_steps << " accumulated";
  out << ", " << (bf16 ? "bf16 autocast" : "fp32") << ", " << total_steps << " steps";
  return out.str();
}

// Hands a sample to the observer, or ends training if the loss has diverged: another
// attempt from the same seed would diverge again, so it is not retried.
std::optional<TrainOutcome> Report(const MetricSample& sample, TrainingObserver& observer) {
  if (!std::isfinite(sample.loss)) {
    return TrainOutcome{TrainOutcome::Kind::kFailed,
                        "loss became " + std::to_string(sample.loss) + " by step " +
                            std::to_string(sample.step) + "; lower optimizer.lr or check the data",
                        /*retryable=*/false};
  }
  observer.OnMetrics(sample);
  return std::nullopt;
}

}  // namespace

uint64_t TotalSteps(const TrainTask& task, int64_t samples_per_epoch) {
  if (task.training.steps > 0) return task.training.steps;
  const int64_t per_step =
      task.training.batch_size * task.training.grad_accum_steps * std::max(1, task.world_size);
  // drop_last: a partial final batch would change shapes; every epoch has whole steps.
  const int64_t steps_per_epoch = std::max<int64_t>(1, samples_per_epoch / per_step);
  return static_cast<uint64_t>(steps_per_epoch) * task.training.epochs;
}

TrainOutcome RunTraining(const TrainTask& task, const DeviceRef& device_ref,
                         TrainingObserver& observer, const std::atomic<bool>& cancel) {
  uint64_t step = 0;
  try {
    const torch::Device device = ToTorchDevice(device_ref);
    const DeviceInfo info = DescribeDevice(device_ref);
    MakeCurrent(device_ref);  // events and streams below belong to the current device
    const auto& t = task.training;
    torch::manual_seed(t.seed);

    // Each rank draws different samples; the model starts the same everywhere.
    auto source = MakeSource(task.data, device, t.batch_size, t.seed * 1000003 + task.rank);
    std::shared_ptr<Network> net = BuildNetwork(task.model, source->Shape());
    net->to(device);
    net->train();
    const std::vector<torch::Tensor> parameters = net->parameters();
    auto optimizer = MakeOptimizer(task.optimizer, parameters);
    const uint64_t total_steps = TotalSteps(task, source->SamplesPerEpoch());
    const uint64_t steps_per_epoch =
        t.steps > 0 ? 0 : std::max<uint64_t>(1, total_steps / std::max<uint32_t>(1, t.epochs));
    const bool bf16 = UseBf16(t.precision, device_ref);
    const int64_t samples_per_step = t.batch_size * t.grad_accum_steps * task.world_size;
    const double lr = task.optimizer.lr;

    observer.OnLog(Describe(task, *net, info, bf16, total_steps));
    MetricWindow metrics(device, samples_per_step, total_steps);
    observer.OnStarted();

    const uint32_t interval = std::max<uint32_t>(1, t.metrics_interval_steps);
    for (step = 1; step <= total_steps; ++step) {
      if (cancel.load(std::memory_order_relaxed)) {
        return {TrainOutcome::Kind::kCancelled, "cancelled at step " + std::to_string(step - 1)};
      }
      for (int64_t micro = 0; micro < t.grad_accum_steps; ++micro) {
        Batch batch = source->Next();
        torch::Tensor loss;
        {
          compat::AutocastScope autocast(device.type(), torch::kBFloat16, bf16);
          torch::Tensor logits = net->forward(batch.inputs);
          loss = torch::nn::functional::cross_entropy(logits.to(torch::kFloat32), batch.targets);
        }
        metrics.AddLoss(loss);
        // Gradients of the micro-batches add up to those of their mean loss.
        (t.grad_accum_steps > 1 ? loss / static_cast<double>(t.grad_accum_steps) : loss).backward();
      }
      optimizer->step();
      // set_to_none: the next backward writes fresh gradients instead of adding to zeros.
      for (const auto& p : parameters) p.mutable_grad().reset();

      const uint32_t epoch =
          steps_per_epoch ? static_cast<uint32_t>((step - 1) / steps_per_epoch) : 0;
      if (step % interval == 0 || step == total_steps) metrics.EndWindow(step, epoch, lr);
      while (auto sample = metrics.Poll()) {
        if (auto diverged = Report(*sample, observer)) return *diverged;
      }
    }
    while (auto sample = metrics.PollBlocking()) {
      if (auto diverged = Report(*sample, observer)) return *diverged;
    }
    return {TrainOutcome::Kind::kSucceeded, "finished " + std::to_string(total_steps) + " steps",
            true};
  } catch (const c10::OutOfMemoryError& e) {
    return {TrainOutcome::Kind::kFailed,
            "out of device memory at step " + std::to_string(step) +
                "; lower training.batch_size: " + e.what_without_backtrace(),
            true};
  } catch (const c10::Error& e) {
    return {TrainOutcome::Kind::kFailed,
            "LibTorch error at step " + std::to_string(step) + ": " + e.what_without_backtrace(),
            true};
  } catch (const std::exception& e) {
    return {TrainOutcome::Kind::kFailed,
            std::string("error at step ") + std::to_string(step) + ": " + e.what(), true};
  }
}

}  // namespace stoke::worker
