// The speed switches on a CUDA device: a step captured as a CUDA graph and replayed
// follows the eager loss curve (MLP, GPT, ResNet); steady-state steps never make the host
// wait for the device, with metrics and the device sampler running; fp16 counts the
// steps it skips; the batch search fits the device; activation checkpointing trains.
// Skips without CUDA; run on the GPU machine with `ctest -L gpu`.
#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <iostream>

#include "tests/support/recording_observer.h"
#include "tests/support/require_cuda.h"
#include "worker/engine/trainer.h"
#include "worker/ops/fused_layer_norm.h"
#include "worker/ops/step_context.h"
#include "worker/runtime/devices.h"
#include "worker/telemetry/device_sampler.h"

#if STOKE_WITH_CUDA
#include <c10/cuda/CUDAFunctions.h>
#endif

namespace stoke::worker {
namespace {

using Recorder = stoke::testing::RecordingObserver;
const DeviceRef kGpu{DeviceKind::kCuda, 0};

class SpeedGpuTest : public ::testing::Test {
 protected:
  void SetUp() override { STOKE_SKIP_WITHOUT_CUDA(); }
};

TrainTask MlpJob() {
  TrainTask task;
  task.job_id = "gpu";
  task.name = "mlp";
  MlpConfig mlp;
  mlp.input_dim = 256;
  mlp.hidden = {1024, 256};
  mlp.num_classes = 10;
  task.model = mlp;
  SyntheticDataConfig data;
  data.features = 256;
  data.num_classes = 10;
  task.data.source = data;
  task.training.batch_size = 512;
  return task;
}

TrainTask GptJob() {
  TrainTask task;
  task.job_id = "gpu";
  task.name = "gpt";
  GptConfig gpt;
  gpt.layers = 2;
  gpt.heads = 4;
  gpt.width = 128;
  gpt.dropout = 0.1;  // the graph must replay dropout's random numbers afresh each step
  task.model = gpt;
  SyntheticDataConfig data;
  data.vocab_size = 256;
  data.context = 64;
  data.samples_per_epoch = 1 << 16;
  task.data.source = data;
  task.training.batch_size = 32;
  task.optimizer.lr = 3e-3;
  task.optimizer.warmup_steps = 10;  // a learning rate that changes under the graph
  task.optimizer.schedule = LrSchedule::kCosine;
  return task;
}

TrainTask ResNetJob() {
  TrainTask task;
  task.job_id = "gpu";
  task.name = "resnet";
  ResNetConfig resnet;
  resnet.depth = 18;
  task.model = resnet;
  SyntheticDataConfig data;
  data.image_shape = {3, 32, 32};
  data.num_classes = 10;
  data.samples_per_epoch = 1 << 14;
  task.data.source = data;
  task.training.batch_size = 64;
  return task;
}

// Sync debug mode: every synchronising CUDA call (a host read of a device value, a
// stream or device synchronize, a blocking copy) throws while it is on.
void SetSyncErrors(bool on) {
#if STOKE_WITH_CUDA
  c10::cuda::warning_state().set_sync_debug_mode(on ? c10::cuda::SyncDebugMode::L_ERROR
                                                    : c10::cuda::SyncDebugMode::L_DISABLED);
#else
  (void)on;
#endif
}

bool Said(const Recorder& r, const std::string& text) {
  for (const auto& line : r.logs) {
    if (line.find(text) != std::string::npos) return true;
  }
  return false;
}

std::vector<double> Losses(TrainTask task, bool graph, Recorder* out = nullptr) {
  task.training.steps = 60;
  task.training.metrics_interval_steps = 5;
  task.training.precision = Precision::kBf16;
  task.training.cuda_graph = graph ? Toggle::kOn : Toggle::kOff;
  Recorder recorder;
  std::atomic<bool> cancel{false};
  const TrainOutcome outcome = RunTraining(task, kGpu, recorder, cancel);
  EXPECT_EQ(outcome.kind, TrainOutcome::Kind::kSucceeded) << outcome.message;
  EXPECT_EQ(Said(recorder, "captured as a CUDA graph"), graph) << task.name;
  // The capture's log line says what the run holds from then on.
  EXPECT_EQ(Said(recorder, "GiB in use, peak"), graph) << task.name;
  std::vector<double> losses;
  for (const auto& s : recorder.samples) losses.push_back(s.loss);
  if (out != nullptr) *out = recorder;
  return losses;
}

void ExpectSameCurve(const TrainTask& task) {
  const std::vector<double> eager = Losses(task, false);
  const std::vector<double> graphed = Losses(task, true);
  ASSERT_EQ(eager.size(), 12u);
  ASSERT_EQ(graphed.size(), eager.size());
  for (size_t i = 0; i < eager.size(); ++i) {
    // bf16 matrix products and cuDNN's algorithm choices differ run to run in the last
    // bits; a step that replayed stale inputs or a frozen learning rate would be far off.
    EXPECT_NEAR(graphed[i], eager[i], 0.03 * std::abs(eager[i]) + 1e-3)
        << task.name << " window " << i;
  }
  EXPECT_LT(graphed.back(), graphed.front()) << task.name << " did not learn";
}

TEST_F(SpeedGpuTest, CudaGraphReplayFollowsTheEagerLossCurveMlp) { ExpectSameCurve(MlpJob()); }
TEST_F(SpeedGpuTest, CudaGraphReplayFollowsTheEagerLossCurveGpt) { ExpectSameCurve(GptJob()); }
TEST_F(SpeedGpuTest, CudaGraphReplayFollowsTheEagerLossCurveResNet) {
  ExpectSameCurve(ResNetJob());
}

// training.fused_kernels: off trains a ResNet and a GPT (between them every kernel of
// Stoke's own: batch norm, max pool, layer norm, GELU backward, bias sums, weight casts,
// the loss) on ATen's operations, says so in the job's log, decides so while the job
// runs (not after), and follows the curve the kernels give within what different
// rounding and summation orders move a bf16 run.
TEST_F(SpeedGpuTest, FusedKernelsOffTrainsOnAtensOperationsAlongTheSameCurve) {
  for (TrainTask task : {ResNetJob(), GptJob()}) {
    const std::vector<double> own = Losses(task, true);
    task.training.fused_kernels = Toggle::kOff;
    Recorder recorder;
    const std::vector<double> aten = Losses(task, true, &recorder);
    EXPECT_TRUE(Said(recorder, "ATen's kernels only")) << task.name;
    ASSERT_EQ(aten.size(), own.size());
    for (size_t i = 0; i < own.size(); ++i) {
      EXPECT_NEAR(aten[i], own[i], 0.05 * std::abs(own[i]) + 1e-3) << task.name << " window " << i;
    }
  }
  // The setting lives as long as its job: Stoke's kernels apply again afterwards.
  EXPECT_TRUE(OwnKernelsAllowed());
  {
    StepContext aten_only(/*own_kernels_allowed=*/false);
    const StepContextScope scope(&aten_only);
    EXPECT_FALSE(
        FusedLayerNormApplies(torch::zeros({4, 8}, torch::TensorOptions().device(torch::kCUDA))));
  }
}

TEST_F(SpeedGpuTest, AGraphWithAccumulationAndClippingMatchesEagerToo) {
  TrainTask task = MlpJob();
  task.training.grad_accum_steps = 3;
  task.optimizer.grad_clip_norm = 0.5;
  ExpectSameCurve(task);
}

// Sync debug mode makes every synchronising CUDA call throw; the job would fail naming
// the step. Steps from 10 (after warm-up and capture) to the last are checked.
void ExpectNoSyncs(TrainTask task) {
  task.training.steps = 300;
  task.training.metrics_interval_steps = 10;
  TrainingProbe probe;
  probe.before_step = [&](uint64_t step) {
    if (step == 10) SetSyncErrors(true);
    if (step == task.training.steps) SetSyncErrors(false);
  };
  Recorder recorder;
  std::atomic<bool> cancel{false};
  const DeviceSampler sampler(DescribeDevice(kGpu), std::chrono::milliseconds(100));
  const TrainOutcome outcome = RunTraining(task, kGpu, recorder, cancel, probe);
  SetSyncErrors(false);
  ASSERT_EQ(outcome.kind, TrainOutcome::Kind::kSucceeded) << task.name << ": " << outcome.message;
  EXPECT_EQ(recorder.samples.size(), 30u);
  EXPECT_TRUE(sampler.Latest().has_value()) << sampler.unavailable_reason();
}

TEST_F(SpeedGpuTest, SyncDebugModeCatchesAHostRead) {
  // The check below is only worth something if the mode really throws.
  SetSyncErrors(true);
  EXPECT_ANY_THROW(torch::ones({1}, torch::kCUDA).sum().item<float>());
  SetSyncErrors(false);
}

TEST_F(SpeedGpuTest, EagerStepsNeverWaitForTheDevice) {
  TrainTask task = GptJob();
  task.training.cuda_graph = Toggle::kOff;
  ExpectNoSyncs(task);
}

TEST_F(SpeedGpuTest, GraphedStepsNeverWaitForTheDevice) { ExpectNoSyncs(GptJob()); }

TEST_F(SpeedGpuTest, Fp16CountsSkippedStepsAndLearns) {
  TrainTask task = MlpJob();
  task.training.steps = 200;
  task.training.metrics_interval_steps = 20;
  task.training.precision = Precision::kFp16;
  task.training.loss_scale.initial = 1e30;  // overflows fp16 at once: skipped steps
  Recorder recorder;
  std::atomic<bool> cancel{false};
  const TrainOutcome outcome = RunTraining(task, kGpu, recorder, cancel);
  ASSERT_EQ(outcome.kind, TrainOutcome::Kind::kSucceeded) << outcome.message;
  EXPECT_TRUE(Said(recorder, "fp16 autocast with loss scaling"));
  EXPECT_TRUE(Said(recorder, "captured as a CUDA graph"));
  const MetricSample& last = recorder.samples.back();
  EXPECT_GE(last.skipped_steps, 10u);  // 1e30 / 2^k reaches fp16's range after ~85 halvings
  EXPECT_LT(last.skipped_steps, 150u);
  EXPECT_LT(last.loss_scale, 1e30);
  EXPECT_LT(last.loss, 0.8 * recorder.samples.front().loss);
}

TEST_F(SpeedGpuTest, AutomaticBatchSizeFitsTheDeviceWithHeadroom) {
  TrainTask task = GptJob();
  task.training.batch_size = 0;
  task.training.batch_size_auto = true;
  task.training.steps = 20;
  task.training.metrics_interval_steps = 10;
  Recorder recorder;
  std::atomic<bool> cancel{false};
  const TrainOutcome outcome = RunTraining(task, kGpu, recorder, cancel);
  ASSERT_EQ(outcome.kind, TrainOutcome::Kind::kSucceeded) << outcome.message;
  ASSERT_TRUE(Said(recorder, "batch size search: ")) << "no search line";
  const uint64_t capacity = DescribeDevice(kGpu).memory_total_bytes;
  for (const auto& s : recorder.samples) {
    EXPECT_LT(s.memory_peak_bytes, 0.95 * static_cast<double>(capacity));
  }
  for (const auto& line : recorder.logs) {
    if (line.rfind("batch size search: ", 0) == 0) std::cout << line << "\n";
  }
}

TEST_F(SpeedGpuTest, ActivationCheckpointingTrainsWithLessMemory) {
  auto peak = [](bool checkpoint) {
    // Deep enough that the blocks' activations, not the output layer or fixed
    // workspaces, set the peak (at 6 layers the margin to the bar was 2%).
    TrainTask task = GptJob();
    auto& gpt = std::get<GptConfig>(task.model);
    gpt.layers = 12;
    gpt.width = 256;
    auto& data = std::get<SyntheticDataConfig>(task.data.source);
    data.vocab_size = 8192;
    data.context = 256;
    task.training.batch_size = 64;
    task.training.steps = 20;
    task.training.metrics_interval_steps = 10;
    task.training.cuda_graph = Toggle::kOff;  // the graph pool would blur the peak
    task.training.activation_checkpointing = checkpoint ? Toggle::kOn : Toggle::kOff;
    Recorder recorder;
    std::atomic<bool> cancel{false};
    // What the process holds already (tests before this one leave cached workspaces and
    // tensors) counts in the run's peak; only what the run adds is compared.
    const uint64_t before = ReadAllocatorStats(kGpu).allocated_bytes;
    const TrainOutcome outcome = RunTraining(task, kGpu, recorder, cancel);
    EXPECT_EQ(outcome.kind, TrainOutcome::Kind::kSucceeded) << outcome.message;
    EXPECT_EQ(Said(recorder, "activation checkpointing"), checkpoint);
    const uint64_t peak = recorder.samples.empty() ? 0 : recorder.samples.back().memory_peak_bytes;
    return peak > before ? peak - before : 0;
  };
  const uint64_t plain = peak(false);
  const uint64_t checkpointed = peak(true);
  // Only the blocks' inputs are kept, and the chunked output layer never holds all the
  // logits: the bar is 40% less (the plain run's output layer writes the logits'
  // gradient over the logits, so the logits count once on both sides).
  EXPECT_LT(checkpointed, 0.6 * static_cast<double>(plain)) << plain << " vs " << checkpointed;
  std::cout << "peak memory: " << plain << " bytes plain, " << checkpointed
            << " with activation checkpointing\n";
}

}  // namespace
}  // namespace stoke::worker
