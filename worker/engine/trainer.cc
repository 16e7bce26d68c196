#include "worker/engine/trainer.h"

#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <optional>
#include <sstream>
#include <stdexcept>

#include "worker/data/sources.h"
#include "worker/dist/communicator.h"
#include "worker/dist/gradient_reducer.h"
#include "worker/engine/checkpoint.h"
#include "worker/engine/devices.h"
#include "worker/engine/evaluator.h"
#include "worker/engine/metric_window.h"
#include "worker/engine/multi_tensor_adamw.h"
#include "worker/engine/optimizers.h"
#include "worker/engine/step_math.h"
#include "worker/engine/torch_compat.h"
#include "worker/engine/torch_device.h"
#include "worker/models/model_factory.h"

namespace stoke::worker {
namespace {

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

// What PyTorch's performance guide sets for training on GPUs: TF32 for the fp32 matrix
// products autocast leaves (cuBLAS and cuDNN), and cuDNN's per-shape algorithm search —
// worth it because batch shapes stay constant (the sampler drops partial batches).
void ConfigureCudaMath() {
  at::globalContext().setFloat32MatmulPrecision("high");
  at::globalContext().setAllowTF32CuDNN(true);
  at::globalContext().setBenchmarkCuDNN(true);
}

// Weights of 4-D (convolution) parameters in NHWC order, as cuDNN's tensor-core kernels
// want them; the optimizer state follows the parameters' layout.
void ToChannelsLast(Network& net) {
  torch::NoGradGuard no_grad;
  for (auto& p : net.parameters()) {
    if (p.dim() == 4) p.set_data(p.data().contiguous(at::MemoryFormat::ChannelsLast));
  }
}

// "AdamW (fused)", "SGD".
std::string OptimizerName(const torch::optim::Optimizer& optimizer, torch::Device device) {
  if (const auto* adamw = dynamic_cast<const MultiTensorAdamW*>(&optimizer)) {
    switch (adamw->RouteFor(device)) {
      case AdamWRoute::kFused:
        return "AdamW (fused)";
      case AdamWRoute::kForeach:
        return "AdamW (foreach)";
      default:
        return "AdamW (per parameter)";
    }
  }
  return "SGD";
}

std::string Describe(const TrainTask& task, Network& net, const DeviceInfo& device, bool bf16,
                     uint64_t total_steps, const std::string& optimizer) {
  std::ostringstream out;
  out << "training " << task.name << " on " << device.device.Label() << " (" << device.name
      << "): " << net.ParameterCount() << " parameters, batch " << task.training.batch_size;
  if (task.training.grad_accum_steps > 1) {
    out << " x " << task.training.grad_accum_steps << " accumulated";
  }
  out << ", " << (bf16 ? "bf16 autocast" : "fp32");
  if (device.device.kind == DeviceKind::kCuda && net.PrefersChannelsLast())
    out << ", channels_last";
  out << ", " << optimizer << ", " << total_steps << " steps";
  return out.str();
}

std::string DescribeEval(uint64_t step, const EvalResult& r) {
  std::ostringstream out;
  out << "eval at step " << step << ": loss " << r.loss;
  if (r.accuracy > 0) out << ", accuracy " << r.accuracy;
  if (r.perplexity > 0) out << ", perplexity " << r.perplexity;
  out << " (" << r.samples << " samples)";
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

uint64_t TotalSteps(const TrainTask& task, int64_t batches_per_epoch) {
  if (task.training.steps > 0) return task.training.steps;
  // Whole optimizer steps per epoch; a partial accumulation at the end is dropped too.
  const int64_t steps_per_epoch =
      std::max<int64_t>(1, batches_per_epoch / task.training.grad_accum_steps);
  return static_cast<uint64_t>(steps_per_epoch) * task.training.epochs;
}

TrainOutcome RunTraining(const TrainTask& task, const DeviceRef& device_ref,
                         TrainingObserver& observer, const std::atomic<bool>& cancel) {
  return RunTraining(task, device_ref, observer, cancel, TrainingProbe{});
}

TrainOutcome RunTraining(const TrainTask& task, const DeviceRef& device_ref,
                         TrainingObserver& observer, const std::atomic<bool>& cancel,
                         const TrainingProbe& probe) {
  uint64_t step = 0;
  try {
    const torch::Device device = ToTorchDevice(device_ref);
    const DeviceInfo info = DescribeDevice(device_ref);
    MakeCurrent(device_ref);  // events and streams below belong to the current device
    const auto& t = task.training;
    torch::manual_seed(t.seed);

    Checkpointer checkpoints(task.job_dir, task.checkpoint.keep);
    const std::optional<CheckpointInfo> resume_from =
        task.job_dir.empty() ? std::nullopt : checkpoints.Latest();
    // The data position follows from the step: each step consumed grad_accum_steps batches.
    const int64_t start_batch =
        resume_from ? static_cast<int64_t>(resume_from->step) * t.grad_accum_steps : 0;
    DataPipeline data = OpenData(task, device, start_batch);
    const DataShape shape = data.train->Shape();
    std::shared_ptr<Network> net = BuildNetwork(task.model, shape);
    net->to(device);
    const bool channels_last = device.is_cuda() && net->PrefersChannelsLast();
    if (device.is_cuda()) ConfigureCudaMath();
    if (channels_last) ToChannelsLast(*net);
    net->train();
    const std::vector<torch::Tensor> parameters = net->parameters();
    auto optimizer = MakeOptimizer(task.optimizer, parameters);
    const uint64_t total_steps = TotalSteps(task, data.train->BatchesPerEpoch());
    const uint64_t steps_per_epoch = std::max<uint64_t>(
        1, static_cast<uint64_t>(data.train->BatchesPerEpoch() / t.grad_accum_steps));
    const bool bf16 = UseBf16(t.precision, device_ref);
    const int64_t samples_per_step = t.batch_size * t.grad_accum_steps * task.world_size;

    uint64_t first_step = 1;
    observer.OnLog(
        Describe(task, *net, info, bf16, total_steps, OptimizerName(*optimizer, device)));
    if (resume_from) {
      // Every rank loads the checkpoint rank 0 wrote.
      first_step = checkpoints.Restore(*resume_from, *net, *optimizer, device_ref) + 1;
      observer.OnLog("resumed from checkpoint at step " + std::to_string(first_step - 1));
    }
    std::unique_ptr<Communicator> communicator;
    std::unique_ptr<GradientReducer> reducer;
    if (task.world_size > 1) {
      communicator = Communicator::Connect(task, device);
      // Rank 0's weights and buffers (BatchNorm statistics) for all, as DDP starts.
      std::vector<torch::Tensor> state = net->parameters();
      for (const auto& b : net->buffers()) state.push_back(b);
      communicator->Broadcast(state, /*root=*/0);
      reducer = std::make_unique<GradientReducer>(parameters, *communicator,
                                                  task.distributed.bucket_bytes,
                                                  task.distributed.first_bucket_bytes);
      // Each rank draws its own random numbers from here on (synthetic batches, dropout,
      // augmentation); a resumed attempt draws afresh.
      torch::manual_seed(t.seed + 0x9E3779B97F4A7C15ull * static_cast<uint64_t>(task.rank + 1) +
                         first_step);
      observer.OnLog("rank " + std::to_string(task.rank) + " of " +
                     std::to_string(task.world_size) + " joined at " +
                     task.distributed.rendezvous_address + "; gradients in " +
                     std::to_string(reducer->bucket_count()) + " buckets");
    }
    MetricWindow metrics(device, samples_per_step, total_steps, first_step - 1);
    MetricWindow::ModelFacts facts;
    facts.flops_per_sample = net->TrainingFlopsPerSample();
    facts.tokens_per_sample = shape.kind == DataShape::Kind::kTokens ? shape.sample.at(0) : 0;
    facts.world_size = task.world_size;
    facts.peak_flops = bf16 ? PeakBf16Flops(info) : 0;  // the bf16 peak says nothing of fp32
    metrics.SetModelFacts(facts);
    metrics.SetAnnotator([&device_ref](MetricSample& sample) {
      const AllocatorStats memory = ReadAllocatorStats(device_ref);
      sample.memory_allocated_bytes = memory.allocated_bytes;
      sample.memory_reserved_bytes = memory.reserved_bytes;
      sample.memory_peak_bytes = memory.peak_allocated_bytes;
      sample.allocator_retries = memory.retries;
    });
    const uint32_t interval = std::max<uint32_t>(1, t.metrics_interval_steps);
    const uint32_t eval_interval = task.eval.interval_steps;
    const uint32_t checkpoint_interval = task.checkpoint.interval_steps;
    const bool write_checkpoints = !task.job_dir.empty() && task.rank == 0;
    observer.OnStarted();

    for (step = first_step; step <= total_steps; ++step) {
      if (cancel.load(std::memory_order_relaxed)) {
        return {TrainOutcome::Kind::kCancelled, "cancelled at step " + std::to_string(step - 1)};
      }
      const double lr = LearningRateAt(task.optimizer, step, total_steps);
      for (auto& group : optimizer->param_groups()) group.options().set_lr(lr);
      for (int64_t micro = 0; micro < t.grad_accum_steps; ++micro) {
        Batch batch = data.train->Next();
        if (channels_last && batch.inputs.dim() == 4) {
          batch.inputs = batch.inputs.contiguous(at::MemoryFormat::ChannelsLast);
        }
        torch::Tensor loss;
        {
          compat::AutocastScope autocast(device.type(), torch::kBFloat16, bf16);
          torch::Tensor outputs = net->forward(batch.inputs);
          loss = ComputeLoss(outputs, batch.targets, net->loss());
        }
        metrics.AddLoss(loss);
        // Gradients are reduced across ranks on the last micro-step only.
        if (reducer && micro + 1 == t.grad_accum_steps) reducer->Arm();
        // Gradients of the micro-batches add up to those of their mean loss.
        (t.grad_accum_steps > 1 ? loss / static_cast<double>(t.grad_accum_steps) : loss).backward();
      }
      if (reducer) reducer->Finish();
      if (task.optimizer.grad_clip_norm > 0)
        ClipGradNorm(parameters, task.optimizer.grad_clip_norm);
      optimizer->step();
      // set_to_none: the next backward writes fresh gradients instead of adding to zeros.
      for (const auto& p : parameters) p.mutable_grad().reset();

      const uint32_t epoch = static_cast<uint32_t>((step - 1) / steps_per_epoch);
      if (step % interval == 0 || step == total_steps) {
        metrics.EndWindow(step, epoch, lr, data.train->TakeWaitSeconds(),
                          reducer ? reducer->TakeExposedSeconds() : 0.0);
      }
      while (auto sample = metrics.Poll()) {
        if (auto diverged = Report(*sample, observer)) return *diverged;
      }
      if ((eval_interval > 0 && step % eval_interval == 0) || step == total_steps) {
        MetricSample sample;
        sample.step = step;
        sample.total_steps = total_steps;
        sample.epoch = epoch;
        sample.eval = Evaluate(*net, *data.eval, shape.kind, bf16);
        observer.OnLog(DescribeEval(step, *sample.eval));
        observer.OnMetrics(sample);
      }
      if (write_checkpoints &&
          ((checkpoint_interval > 0 && step % checkpoint_interval == 0) || step == total_steps)) {
        checkpoints.Save(step, *net, *optimizer, device_ref);
      }
    }
    while (auto sample = metrics.PollBlocking()) {
      if (auto diverged = Report(*sample, observer)) return *diverged;
    }
    if (probe.on_finished) probe.on_finished(parameters);
    return {TrainOutcome::Kind::kSucceeded, "finished " + std::to_string(total_steps) + " steps",
            true};
  } catch (const CollectiveTimeout& e) {
    return {TrainOutcome::Kind::kFailed, "at step " + std::to_string(step) + ": " + e.what(), true};
  } catch (const c10::OutOfMemoryError& e) {
    return {TrainOutcome::Kind::kFailed,
            "out of device memory at step " + std::to_string(step) +
                "; lower training.batch_size: " + e.what_without_backtrace(),
            true};
  } catch (const c10::Error& e) {
    return {TrainOutcome::Kind::kFailed,
            "LibTorch error at step " + std::to_string(step) + ": " + e.what_without_backtrace(),
            true};
  } catch (const std::invalid_argument& e) {
    // The spec asks for something this data or model cannot do: retrying will not help.
    return {TrainOutcome::Kind::kFailed, e.what(), false};
  } catch (const std::exception& e) {
    return {TrainOutcome::Kind::kFailed,
            std::string("error at step ") + std::to_string(step) + ": " + e.what(), true};
  }
}

}  // namespace stoke::worker
