#include "worker/engine/training_run.h"

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <sstream>
#include <variant>

#include "worker/engine/batch_search.h"
#include "worker/engine/fake_batch.h"
#include "worker/engine/optimizers.h"
#include "worker/engine/trainer.h"
#include "worker/models/model_factory.h"
#include "worker/runtime/devices.h"
#include "worker/runtime/torch_compat.h"
#include "worker/runtime/torch_device.h"

namespace stoke::worker {
namespace {

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

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Bytes the optimizer's state will take once it has stepped (fp32 moments).
uint64_t OptimizerStateBytes(const OptimizerConfig& config, Network& net) {
  uint64_t param_bytes = 0;
  for (const auto& p : net.parameters()) param_bytes += p.numel() * p.element_size();
  if (std::holds_alternative<AdamWConfig>(config.kind)) return 2 * param_bytes;
  return std::get<SgdConfig>(config.kind).momentum > 0 ? param_bytes : 0;
}

// How a TorchScript model's file is opened: beneath the job's data roots.
data::ReadOptions ModelFiles(const TrainTask& task) {
  data::ReadOptions files;
  files.roots = task.data_roots;
  return files;
}

// Applies the job's layout and memory switches to a freshly built network.
Layout PrepareNetwork(Network& net, const TrainTask& task, const torch::Device& device) {
  Layout layout;
  layout.channels_last =
      device.is_cuda() && net.PrefersChannelsLast() && Resolve(task.training.channels_last, true);
  if (layout.channels_last) ToChannelsLast(net);
  layout.inputs_channels_last = layout.channels_last && !net.WantsContiguousInputs();
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
                     const MathChoice& math, Communicator* communicator, TrainingObserver& observer,
                     const std::atomic<bool>& cancel, const NetworkBuilder& build_network) {
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
    const DataPipeline probe_data = OpenData(probe_task, device, 0, &cancel);
    const DataShape shape = probe_data.train->Shape();
    const int64_t samples_per_rank = probe_data.train->BatchesPerEpoch();
    // Uncompiled: a compiled model would compile again for every batch size tried.
    std::shared_ptr<Network> net = build_network(task.model, shape, ModelFiles(task));
    net->to(device);
    const Layout layout = PrepareNetwork(*net, task, device);
    const uint64_t reserve = OptimizerStateBytes(task.optimizer, *net);
    const uint64_t capacity = SearchCapacityBytes(device_ref);
    const BatchSearchResult found = SearchBatchSize(
        [&](int64_t batch) {
          return MeasureBatch(*net, shape, device_ref, math.autocast, math.dtype == at::kHalf,
                              layout.inputs_channels_last, batch, reserve);
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
                     const MathChoice& math, const Layout& layout, bool own_kernels,
                     uint64_t total_steps, const std::string& optimizer) {
  std::ostringstream out;
  out << "training " << task.name << " on " << device.device.Label() << " (" << device.name
      << "): " << net.ParameterCount() << " parameters, batch " << task.training.batch_size;
  if (task.training.grad_accum_steps > 1) {
    out << " x " << task.training.grad_accum_steps << " accumulated";
  }
  out << ", " << math.label;
  if (layout.channels_last) {
    out << (layout.inputs_channels_last ? ", channels_last" : ", channels_last weights");
  }
  if (layout.checkpoint_blocks) out << ", activation checkpointing";
  if (device.device.kind == DeviceKind::kCuda && !own_kernels) {
    out << ", ATen's kernels only (fused_kernels off)";
  }
  out << ", " << optimizer << ", " << total_steps << " steps";
  return out.str();
}

// torch.compile as training.compile asks, then the model's one-time work (its FLOP count,
// the compile itself) on a batch of the training shape, before anything is timed.
void PreparePythonModel(TrainingRun& r, TrainingObserver& observer) {
  Network& net = *r.net;
  const auto began = std::chrono::steady_clock::now();
  const std::string compile = net.SetCompile(r.task.training.compile, r.device.is_cuda());
  const double setting_up = SecondsSince(began);
  if (!compile.empty()) observer.OnLog("model.python: " + compile);
  const FakeBatch fake = MakeFakeBatch(net, r.shape, r.task.training.batch_size, r.device,
                                       r.layout.inputs_channels_last);
  Network::Preparation prepared;
  {
    compat::AutocastScope autocast(r.device.type(), r.math.dtype, r.math.autocast);
    prepared = net.Prepare(fake.inputs, fake.targets);
  }
  // torch.compile's own set-up counts as compiling, when there is a compile.
  r.startup.compile_seconds =
      prepared.compile_seconds > 0 ? prepared.compile_seconds + setting_up : 0.0;
  if (!prepared.note.empty()) observer.OnLog("model.python: " + prepared.note);
}

}  // namespace

std::unique_ptr<TrainingRun> BuildTrainingRun(const TrainTask& job_task,
                                              const DeviceRef& device_ref,
                                              TrainingObserver& observer,
                                              const std::atomic<bool>& cancel,
                                              const NetworkBuilder& given_builder) {
  const NetworkBuilder build_network = given_builder ? given_builder : NetworkBuilder(BuildNetwork);
  auto run = std::make_unique<TrainingRun>();
  TrainingRun& r = *run;
  r.task = job_task;
  TrainTask& task = r.task;
  r.device_ref = device_ref;
  r.device = ToTorchDevice(device_ref);
  const torch::Device device = r.device;
  r.info = DescribeDevice(device_ref);
  MakeCurrent(device_ref);  // events and streams below belong to the current device
  r.math = ChooseMath(task.training.precision, device_ref);
  const MathChoice& math = r.math;
  if (device.is_cuda()) {
    ConfigureCudaMath(Resolve(task.training.tf32, true),
                      Resolve(task.training.cudnn_benchmark, true));
  }
  r.context = std::make_unique<StepContext>(Resolve(task.training.fused_kernels, true));
  // The batch search and the build's forward passes run under the run's context too.
  const StepContextScope building(r.context.get());
  if (task.world_size > 1) r.communicator = Communicator::Connect(task, device);
  if (task.training.batch_size_auto) {
    const auto search_began = std::chrono::steady_clock::now();
    torch::manual_seed(task.training.seed);
    ChooseBatchSize(task, device_ref, device, math, r.communicator.get(), observer, cancel,
                    build_network);
    r.startup.batch_search_seconds = SecondsSince(search_began);
  }
  const auto& t = task.training;
  torch::manual_seed(t.seed);
  ResetPeakMemoryStats(device_ref);  // this job's peak, not an earlier one's on this worker

  r.checkpoints.emplace(task.job_dir, task.checkpoint.keep);
  const std::optional<CheckpointInfo> resume_from =
      task.job_dir.empty() ? std::nullopt : r.checkpoints->Latest();
  // The data position follows from the step: each step consumed grad_accum_steps batches.
  const int64_t start_batch =
      resume_from ? static_cast<int64_t>(resume_from->step) * t.grad_accum_steps : 0;
  const auto data_began = std::chrono::steady_clock::now();
  r.data = OpenData(task, device, start_batch, &cancel);
  r.shape = r.data.train->Shape();
  r.startup.data_seconds = SecondsSince(data_began);
  const auto model_began = std::chrono::steady_clock::now();
  r.net = build_network(task.model, r.shape, ModelFiles(task));
  Network& net = *r.net;
  net.to(device);
  if (Resolve(t.activation_checkpointing, false) && !net.SupportsActivationCheckpointing()) {
    observer.OnLog("training.activation_checkpointing: this model has no blocks to checkpoint");
  }
  r.layout = PrepareNetwork(net, task, device);
  // Image batches come out of their preparation in the layout the network takes.
  r.data.train->SetImagesChannelsLast(r.layout.inputs_channels_last);
  r.data.eval->SetImagesChannelsLast(r.layout.inputs_channels_last);
  if (std::holds_alternative<PythonConfig>(task.model)) PreparePythonModel(r, observer);
  r.parameters = net.parameters();
  r.optimizer = MakeOptimizer(task.optimizer, r.parameters, device);
  if (math.loss_scaling) r.scaler = std::make_unique<LossScaler>(t.loss_scale, device);
  r.total_steps = TotalSteps(task, r.data.train->BatchesPerEpoch());
  r.steps_per_epoch = std::max<uint64_t>(
      1, static_cast<uint64_t>(r.data.train->BatchesPerEpoch() / t.grad_accum_steps));
  const int64_t samples_per_step = t.batch_size * t.grad_accum_steps * task.world_size;

  observer.OnLog(Describe(task, net, r.info, math, r.layout, r.context->own_kernels_allowed(),
                          r.total_steps, r.optimizer->name()));
  if (resume_from) {
    // Every rank loads the checkpoint rank 0 wrote.
    r.first_step = r.checkpoints->Restore(*resume_from, net, r.optimizer->state(), device_ref,
                                          r.scaler.get()) +
                   1;
    observer.OnLog("resumed from checkpoint at step " + std::to_string(r.first_step - 1));
  }
  if (r.communicator) {
    // Rank 0's weights and buffers (BatchNorm statistics) for all, as DDP starts.
    std::vector<torch::Tensor> state = net.parameters();
    for (const auto& b : net.buffers()) state.push_back(b);
    r.communicator->Broadcast(state, /*root=*/0, "the parameter broadcast");
    r.reducer = std::make_unique<GradientReducer>(
        r.parameters, *r.communicator, r.context->gradient_destinations(),
        task.distributed.bucket_bytes, task.distributed.first_bucket_bytes);
    // Each rank draws its own random numbers from here on (synthetic batches, dropout,
    // augmentation); a resumed attempt draws afresh.
    torch::manual_seed(t.seed + 0x9E3779B97F4A7C15ull * static_cast<uint64_t>(task.rank + 1) +
                       r.first_step);
    observer.OnLog("rank " + std::to_string(task.rank) + " of " + std::to_string(task.world_size) +
                   " joined at " + task.distributed.rendezvous_address + "; gradients in " +
                   std::to_string(r.reducer->bucket_count()) + " buckets");
  }

  StepParts parts;
  parts.net = r.net.get();
  parts.optimizer = r.optimizer.get();
  parts.parameters = r.parameters;
  parts.scaler = r.scaler.get();
  parts.reducer = r.reducer.get();
  parts.grad_clip_norm = task.optimizer.grad_clip_norm;
  parts.device = device;
  parts.autocast = math.autocast;
  parts.autocast_dtype = math.dtype;
  parts.channels_last = r.layout.inputs_channels_last;
  parts.context = r.context.get();
  parts.verify_capture = std::holds_alternative<PythonConfig>(task.model);
  // TorchScript modules may branch on host state that a captured graph would freeze, so
  // they are captured only when asked. Python models are captured by default, and the
  // capture is checked against an eager forward pass (StepParts::verify_capture).
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
  r.runner = std::make_unique<StepRunner>(
      parts, graph, [&observer](const std::string& line) { observer.OnLog(line); });

  r.metrics =
      std::make_unique<MetricWindow>(device, samples_per_step, r.total_steps, r.first_step - 1);
  MetricWindow::ModelFacts facts;
  facts.flops_per_sample = net.TrainingFlopsPerSample();
  facts.tokens_per_sample = r.shape.kind == DataShape::Kind::kTokens ? r.shape.sample.at(0) : 0;
  facts.world_size = task.world_size;
  // The bf16 peak says nothing of fp32 (fp16's tensor-core peak is the same as bf16's).
  facts.peak_flops = math.autocast ? PeakBf16Flops(r.info) : 0;
  r.metrics->SetModelFacts(facts);
  if (r.scaler) r.metrics->TrackLossScale(r.scaler->skipped_steps(), r.scaler->scale());
  r.metrics->SetAnnotator([device_ref](MetricSample& sample) {
    const AllocatorStats memory = ReadAllocatorStats(device_ref);
    sample.memory_allocated_bytes = memory.allocated_bytes;
    sample.memory_reserved_bytes = memory.reserved_bytes;
    sample.memory_peak_bytes = memory.peak_allocated_bytes;
    sample.allocator_retries = memory.retries;
  });
  r.startup.model_seconds = SecondsSince(model_began);
  return run;
}

}  // namespace stoke::worker
