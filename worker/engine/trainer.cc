#include "worker/engine/trainer.h"

#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <fstream>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <variant>

#include "worker/common/status_error.h"
#include "worker/data/sources.h"
#include "worker/dist/communicator.h"
#include "worker/dist/gradient_reducer.h"
#include "worker/engine/batch_search.h"
#include "worker/engine/checkpoint.h"
#include "worker/engine/evaluator.h"
#include "worker/engine/loss_scaler.h"
#include "worker/engine/metric_window.h"
#include "worker/engine/multi_tensor_adamw.h"
#include "worker/engine/optimizers.h"
#include "worker/engine/step_math.h"
#include "worker/engine/train_step.h"
#include "worker/models/model_factory.h"
#include "worker/ops/own_kernels.h"
#include "worker/runtime/devices.h"
#include "worker/runtime/step_trace.h"
#include "worker/runtime/torch_compat.h"
#include "worker/runtime/torch_device.h"

namespace stoke::worker {
namespace {

// How the forward pass computes: bf16 where asked, or where AUTO and the device does it
// natively at full speed (CPUs emulate much of bf16, so AUTO keeps them in fp32); fp16
// with a loss scaler where asked (autocast to fp16 on GPUs only: LibTorch's CPU autocast
// knows bf16 alone, so a CPU computes fp32 and still scales the loss).
struct MathChoice {
  bool autocast = false;
  at::ScalarType dtype = at::kBFloat16;
  bool loss_scaling = false;
  std::string label;
};

MathChoice ChooseMath(Precision precision, const DeviceRef& device) {
  const bool cuda = device.kind == DeviceKind::kCuda;
  switch (precision) {
    case Precision::kBf16:
      return {true, at::kBFloat16, false, "bf16 autocast"};
    case Precision::kFp16:
      if (cuda) return {true, at::kHalf, true, "fp16 autocast with loss scaling"};
      return {false, at::kHalf, true, "fp32 with loss scaling (no fp16 autocast on CPUs)"};
    case Precision::kFp32:
      return {false, at::kFloat, false, "fp32"};
    case Precision::kAuto:
      if (cuda && SupportsBf16(device)) return {true, at::kBFloat16, false, "bf16 autocast"};
      return {false, at::kFloat, false, "fp32"};
  }
  return {};
}

// What PyTorch's performance guide sets for training on GPUs: TF32 for the fp32 matrix
// products autocast leaves (cuBLAS and cuDNN), and cuDNN's per-shape algorithm search —
// worth it because batch shapes stay constant (the sampler drops partial batches).
void ConfigureCudaMath(bool tf32, bool cudnn_benchmark) {
  at::globalContext().setFloat32MatmulPrecision(tf32 ? "high" : "highest");
  at::globalContext().setAllowTF32CuDNN(tf32);
  at::globalContext().setBenchmarkCuDNN(cudnn_benchmark);
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

void SetLearningRate(torch::optim::Optimizer& optimizer, double lr) {
  if (auto* adamw = dynamic_cast<MultiTensorAdamW*>(&optimizer)) {
    adamw->SetLearningRate(lr);
    return;
  }
  for (auto& group : optimizer.param_groups()) group.options().set_lr(lr);
}

// Bytes the optimizer's state will take once it has stepped (fp32 moments).
uint64_t OptimizerStateBytes(const OptimizerConfig& config, Network& net) {
  uint64_t param_bytes = 0;
  for (const auto& p : net.parameters()) param_bytes += p.numel() * p.element_size();
  if (std::holds_alternative<AdamWConfig>(config.kind)) return 2 * param_bytes;
  return std::get<SgdConfig>(config.kind).momentum > 0 ? param_bytes : 0;
}

struct Layout {
  bool channels_last = false;
  bool checkpoint_blocks = false;
};

// Applies the job's layout and memory switches to a freshly built network.
Layout PrepareNetwork(Network& net, const TrainTask& task, const torch::Device& device) {
  Layout layout;
  layout.channels_last =
      device.is_cuda() && net.PrefersChannelsLast() && Resolve(task.training.channels_last, true);
  if (layout.channels_last) ToChannelsLast(net);
  layout.checkpoint_blocks = Resolve(task.training.activation_checkpointing, false) &&
                             net.SupportsActivationCheckpointing();
  net.SetActivationCheckpointing(layout.checkpoint_blocks);
  net.train();
  return layout;
}

// batch_size: auto. Sets the task's batch size (and micro-steps, for an effective batch)
// from a search on a throw-away copy of the network, or from the choice an earlier
// attempt of the job saved. Several ranks take rank 0's choice.
void ChooseBatchSize(TrainTask& task, const DeviceRef& device_ref, const torch::Device& device,
                     const MathChoice& math, Communicator* communicator,
                     TrainingObserver& observer) {
  auto& t = task.training;
  const std::string saved_path = task.job_dir.empty() ? "" : task.job_dir + "/auto-batch";
  int64_t chosen[2] = {0, 1};  // batch, micro-steps
  if (!saved_path.empty()) {
    std::ifstream saved(saved_path);
    if (saved >> chosen[0] >> chosen[1] && chosen[0] > 0 && chosen[1] > 0) {
      observer.OnLog("batch size " + std::to_string(chosen[0]) + " x " + std::to_string(chosen[1]) +
                     " micro-steps, as searched by an earlier attempt");
    } else {
      chosen[0] = 0;
    }
  }
  if (chosen[0] == 0) {
    TrainTask probe_task = task;
    probe_task.training.batch_size = 1;
    const DataPipeline probe_data = OpenData(probe_task, device, 0);
    const DataShape shape = probe_data.train->Shape();
    const int64_t samples_per_rank = probe_data.train->BatchesPerEpoch();
    std::shared_ptr<Network> net = BuildNetwork(task.model, shape);
    net->to(device);
    const Layout layout = PrepareNetwork(*net, task, device);
    const uint64_t reserve = OptimizerStateBytes(task.optimizer, *net);
    const uint64_t capacity = SearchCapacityBytes(device_ref);
    const BatchSearchResult found = SearchBatchSize(
        [&](int64_t batch) {
          return MeasureBatch(*net, shape, device_ref, math.autocast, math.dtype == at::kHalf,
                              layout.channels_last, batch, reserve);
        },
        SearchLimit(device_ref, samples_per_rank), capacity);
    observer.OnLog(DescribeSearch(found, capacity));
    chosen[0] = found.batch;
    if (t.effective_batch_size > 0) {
      const AccumulationPlan plan =
          PlanAccumulation(t.effective_batch_size, found.batch, task.world_size);
      chosen[0] = plan.batch;
      chosen[1] = plan.micro_steps;
      observer.OnLog(
          "effective batch " + std::to_string(plan.effective) + " = " + std::to_string(plan.batch) +
          " x " + std::to_string(plan.micro_steps) + " micro-steps x " +
          std::to_string(task.world_size) + " ranks" +
          (plan.effective == t.effective_batch_size
               ? ""
               : " (asked " + std::to_string(t.effective_batch_size) + "; no exact split fits)"));
    }
  }
  if (communicator != nullptr) {
    std::vector<torch::Tensor> agreed = {torch::tensor({chosen[0], chosen[1]}).to(device)};
    communicator->Broadcast(agreed, /*root=*/0, "the broadcast of rank 0's batch size");
    const torch::Tensor host = agreed[0].cpu();
    chosen[0] = host[0].item<int64_t>();
    chosen[1] = host[1].item<int64_t>();
  }
  if (!saved_path.empty() && task.rank == 0) {
    std::ofstream(saved_path) << chosen[0] << " " << chosen[1] << "\n";
  }
  t.batch_size = chosen[0];
  t.grad_accum_steps = chosen[1];
  ReleaseCachedMemory(device_ref);
}

std::string Describe(const TrainTask& task, Network& net, const DeviceInfo& device,
                     const MathChoice& math, const Layout& layout, uint64_t total_steps,
                     const std::string& optimizer) {
  std::ostringstream out;
  out << "training " << task.name << " on " << device.device.Label() << " (" << device.name
      << "): " << net.ParameterCount() << " parameters, batch " << task.training.batch_size;
  if (task.training.grad_accum_steps > 1) {
    out << " x " << task.training.grad_accum_steps << " accumulated";
  }
  out << ", " << math.label;
  if (layout.channels_last) out << ", channels_last";
  if (layout.checkpoint_blocks) out << ", activation checkpointing";
  if (device.device.kind == DeviceKind::kCuda && !OwnKernelsAllowed()) {
    out << ", ATen's kernels only (fused_kernels off)";
  }
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

TrainOutcome RunTraining(const TrainTask& job_task, const DeviceRef& device_ref,
                         TrainingObserver& observer, const std::atomic<bool>& cancel,
                         const TrainingProbe& probe) {
  uint64_t step = 0;
  try {
    TrainTask task = job_task;  // batch_size: auto fills in the batch size
    const torch::Device device = ToTorchDevice(device_ref);
    const DeviceInfo info = DescribeDevice(device_ref);
    MakeCurrent(device_ref);  // events and streams below belong to the current device
    const MathChoice math = ChooseMath(task.training.precision, device_ref);
    if (device.is_cuda()) {
      ConfigureCudaMath(Resolve(task.training.tf32, true),
                        Resolve(task.training.cudnn_benchmark, true));
    }
    // For the whole run: the batch search, the steps and evaluation decide alike.
    const OwnKernelsSetting own_kernels(Resolve(task.training.fused_kernels, true));
    std::unique_ptr<Communicator> communicator;
    if (task.world_size > 1) communicator = Communicator::Connect(task, device);
    if (task.training.batch_size_auto) {
      torch::manual_seed(task.training.seed);
      ChooseBatchSize(task, device_ref, device, math, communicator.get(), observer);
    }
    const auto& t = task.training;
    torch::manual_seed(t.seed);
    ResetPeakMemoryStats(device_ref);  // this job's peak, not an earlier one's on this worker

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
    if (Resolve(t.activation_checkpointing, false) && !net->SupportsActivationCheckpointing()) {
      observer.OnLog("training.activation_checkpointing: this model has no blocks to checkpoint");
    }
    const Layout layout = PrepareNetwork(*net, task, device);
    const std::vector<torch::Tensor> parameters = net->parameters();
    auto optimizer = MakeOptimizer(task.optimizer, parameters);
    std::unique_ptr<LossScaler> scaler;
    if (math.loss_scaling) scaler = std::make_unique<LossScaler>(t.loss_scale, device);
    const uint64_t total_steps = TotalSteps(task, data.train->BatchesPerEpoch());
    const uint64_t steps_per_epoch = std::max<uint64_t>(
        1, static_cast<uint64_t>(data.train->BatchesPerEpoch() / t.grad_accum_steps));
    const int64_t samples_per_step = t.batch_size * t.grad_accum_steps * task.world_size;

    uint64_t first_step = 1;
    observer.OnLog(
        Describe(task, *net, info, math, layout, total_steps, OptimizerName(*optimizer, device)));
    if (resume_from) {
      // Every rank loads the checkpoint rank 0 wrote.
      first_step =
          checkpoints.Restore(*resume_from, *net, *optimizer, device_ref, scaler.get()) + 1;
      observer.OnLog("resumed from checkpoint at step " + std::to_string(first_step - 1));
    }
    std::unique_ptr<GradientReducer> reducer;
    if (communicator) {
      // Rank 0's weights and buffers (BatchNorm statistics) for all, as DDP starts.
      std::vector<torch::Tensor> state = net->parameters();
      for (const auto& b : net->buffers()) state.push_back(b);
      communicator->Broadcast(state, /*root=*/0, "the parameter broadcast");
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

    StepParts parts;
    parts.net = net.get();
    parts.optimizer = optimizer.get();
    parts.parameters = parameters;
    parts.scaler = scaler.get();
    parts.reducer = reducer.get();
    parts.grad_clip_norm = task.optimizer.grad_clip_norm;
    parts.device = device;
    parts.autocast = math.autocast;
    parts.autocast_dtype = math.dtype;
    parts.channels_last = layout.channels_last;
    // TorchScript modules are the user's code: their forward may branch on host state
    // that a captured graph would freeze, so they are captured only when asked.
    const bool user_code = std::holds_alternative<TorchScriptConfig>(task.model);
    bool graph = device.is_cuda() && Resolve(t.cuda_graph, !user_code);
    if (device.is_cuda() && user_code && t.cuda_graph == Toggle::kDefault) {
      observer.OnLog(
          "training.cuda_graph: off by default for TorchScript models (a forward that "
          "depends on host state would be frozen by the capture); set it on to capture");
    }
    if (graph) {
      const bool lr_changes =
          task.optimizer.warmup_steps > 0 || task.optimizer.schedule != LrSchedule::kConstant;
      const std::string why_not = WhyNotCapturable(parts, lr_changes);
      if (!why_not.empty()) {
        observer.OnLog("training.cuda_graph: training eagerly: " + why_not);
        graph = false;
      }
    } else if (t.cuda_graph == Toggle::kOn) {
      observer.OnLog("training.cuda_graph: training eagerly: CUDA graphs need a CUDA device");
    }
    StepRunner runner(parts, graph, [&observer](const std::string& line) { observer.OnLog(line); });

    MetricWindow metrics(device, samples_per_step, total_steps, first_step - 1);
    MetricWindow::ModelFacts facts;
    facts.flops_per_sample = net->TrainingFlopsPerSample();
    facts.tokens_per_sample = shape.kind == DataShape::Kind::kTokens ? shape.sample.at(0) : 0;
    facts.world_size = task.world_size;
    // The bf16 peak says nothing of fp32 (fp16's tensor-core peak is the same as bf16's).
    facts.peak_flops = math.autocast ? PeakBf16Flops(info) : 0;
    metrics.SetModelFacts(facts);
    if (scaler) metrics.TrackLossScale(scaler->skipped_steps(), scaler->scale());
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
    auto* adamw = dynamic_cast<MultiTensorAdamW*>(optimizer.get());
    observer.OnStarted();

    std::vector<Batch> micro_batches(static_cast<size_t>(t.grad_accum_steps));
    StepTrace trace(task.job_id, task.rank, [&](const std::string& line) { observer.OnLog(line); });
    for (step = first_step; step <= total_steps; ++step) {
      if (cancel.load(std::memory_order_relaxed)) {
        return {TrainOutcome::Kind::kCancelled, "cancelled at step " + std::to_string(step - 1)};
      }
      if (probe.before_step) probe.before_step(step);
      const double lr = LearningRateAt(task.optimizer, step, total_steps);
      SetLearningRate(*optimizer, lr);
      for (auto& batch : micro_batches) batch = data.train->Next();
      trace.BeforeStep(step);
      for (const auto& loss : runner.Run(micro_batches)) metrics.AddLoss(loss);
      trace.AfterStep(step);

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
        sample.eval =
            Evaluate(*net, *data.eval, shape.kind, math.autocast && math.dtype == at::kBFloat16);
        observer.OnLog(DescribeEval(step, *sample.eval));
        observer.OnMetrics(sample);
      }
      if (write_checkpoints &&
          ((checkpoint_interval > 0 && step % checkpoint_interval == 0) || step == total_steps)) {
        if (adamw != nullptr) adamw->SyncHostState();
        checkpoints.Save(step, *net, *optimizer, device_ref, scaler.get());
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
  } catch (const StatusError& e) {
    // Classified by its code: a data path not mounted yet is retried, a bad file is not.
    return {TrainOutcome::Kind::kFailed, e.what(), IsRetryable(e.code())};
  } catch (const std::invalid_argument& e) {
    // The spec asks for something this data or model cannot do: retrying will not help.
    return {TrainOutcome::Kind::kFailed, e.what(), false};
  } catch (const std::exception& e) {
    return {TrainOutcome::Kind::kFailed,
            std::string("error at step ") + std::to_string(step) + ": " + e.what(), true};
  }
}

}  // namespace stoke::worker
