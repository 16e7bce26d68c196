// The engine's speed switches on CPU, each doing what it claims: the fp16 loss scaler
// skips a step whose gradients overflow and lowers its scale (and grows it again after
// clean steps); `batch_size: auto` finds the largest batch a trial fits, keeps headroom,
// and plans accumulation to an effective batch; a job with either switch trains to the
// end on a real engine. (CUDA graphs and the GPU side of each switch are tested in
// tests/gpu.)
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <atomic>
#include <stdexcept>

#include "tests/support/recording_observer.h"
#include "tests/support/small_tasks.h"
#include "tests/support/temp_dir.h"
#include "worker/engine/batch_search.h"
#include "worker/engine/loss_scaler.h"
#include "worker/engine/optimizers.h"
#include "worker/engine/train_step.h"
#include "worker/engine/trainer.h"
#include "worker/models/mlp.h"

namespace stoke::worker {
namespace {

using Recorder = stoke::testing::RecordingObserver;
const DeviceRef kCpu{DeviceKind::kCpu, 0};

TEST(LossScaler, UnscalesFiniteGradientsAndFlagsOverflow) {
  LossScaleConfig config;
  config.initial = 1024;
  LossScaler scaler(config, torch::kCPU);
  std::vector<torch::Tensor> grads = {torch::full({3}, 2048.0), torch::full({2}, -512.0)};
  scaler.UnscaleAndCheck(grads);
  EXPECT_EQ(scaler.found_inf().item<float>(), 0);
  EXPECT_TRUE(torch::allclose(grads[0], torch::full({3}, 2.0)));
  EXPECT_TRUE(torch::allclose(grads[1], torch::full({2}, -0.5)));

  std::vector<torch::Tensor> bad = {torch::ones({2}),
                                    torch::tensor({1.0f, std::numeric_limits<float>::infinity()})};
  scaler.UnscaleAndCheck(bad);
  EXPECT_EQ(scaler.found_inf().item<float>(), 1);
  scaler.Update();
  EXPECT_EQ(scaler.scale().item<float>(), 512);  // halved
  EXPECT_EQ(scaler.skipped_steps().item<double>(), 1);
}

TEST(LossScaler, GrowsAfterTheIntervalOfCleanSteps) {
  LossScaleConfig config;
  config.initial = 8;
  config.growth_interval = 3;
  LossScaler scaler(config, torch::kCPU);
  for (int i = 0; i < 2; ++i) {
    std::vector<torch::Tensor> grads = {torch::ones({4})};
    scaler.UnscaleAndCheck(grads);
    scaler.Update();
    EXPECT_EQ(scaler.scale().item<float>(), 8) << "after " << i + 1 << " clean steps";
  }
  std::vector<torch::Tensor> grads = {torch::ones({4})};
  scaler.UnscaleAndCheck(grads);
  scaler.Update();
  EXPECT_EQ(scaler.scale().item<float>(), 16);
  EXPECT_EQ(scaler.skipped_steps().item<double>(), 0);
}

// A whole step through StepRunner: a batch with huge inputs makes the scaled weight
// gradients overflow fp32 to inf; the optimizer must leave the weights alone and the
// scale must halve. The next, ordinary batch trains.
TEST(LossScaler, AStepWithAnInfiniteGradientIsSkippedAndTheScaleLowered) {
  torch::manual_seed(3);
  MlpConfig config;
  config.input_dim = 8;
  config.hidden = {16};
  config.num_classes = 3;
  Mlp net(config);
  const std::vector<torch::Tensor> params = net->parameters();
  OptimizerConfig adamw;
  adamw.kind = AdamWConfig{0.9, 0.999, 1e-8, AdamWRoute::kForeach};
  adamw.lr = 1e-2;
  const auto optimizer = MakeOptimizer(adamw, params, torch::kCPU);
  LossScaler scaler(LossScaleConfig{}, torch::kCPU);  // 65536
  StepParts parts;
  parts.net = net.get();
  parts.optimizer = optimizer.get();
  parts.parameters = params;
  parts.scaler = &scaler;
  StepRunner runner(parts, /*graph=*/false, [](const std::string&) {});
  const torch::Tensor labels = torch::randint(3, {32});
  const Batch overflowing{torch::full({32, 8}, 1e36), labels};
  const Batch ordinary{torch::randn({32, 8}), labels};
  std::vector<torch::Tensor> before;
  for (const auto& p : params) before.push_back(p.detach().clone());

  runner.Run({overflowing});
  for (size_t i = 0; i < params.size(); ++i) {
    EXPECT_TRUE(torch::equal(params[i], before[i])) << "parameter " << i << " changed";
  }
  EXPECT_EQ(scaler.skipped_steps().item<double>(), 1);
  EXPECT_EQ(scaler.scale().item<float>(), 32768);

  runner.Run({ordinary});
  EXPECT_EQ(scaler.skipped_steps().item<double>(), 1);
  bool all_finite = true, changed = false;
  for (size_t i = 0; i < params.size(); ++i) {
    all_finite &= params[i].isfinite().all().item<bool>();
    changed |= !torch::equal(params[i], before[i]);
  }
  EXPECT_TRUE(all_finite);
  EXPECT_TRUE(changed);
}

TrainTask SmallJob(uint64_t steps) {
  TrainTask task = stoke::testing::SmallMlpTask(steps);
  task.name = "switches";
  return task;
}

// On a CPU fp16 has no autocast and fp32 gradients do not overflow: no step is skipped
// and the scale grows every growth_interval steps; the samples carry both.
TEST(Fp16Job, ReportsTheScaleAndSkippedStepsAndLearns) {
  TrainTask task = SmallJob(200);
  task.training.precision = Precision::kFp16;
  task.training.loss_scale.initial = 1024;
  task.training.loss_scale.growth_interval = 50;
  Recorder recorder;
  std::atomic<bool> cancel{false};
  const TrainOutcome outcome = RunTraining(task, kCpu, recorder, cancel);
  ASSERT_EQ(outcome.kind, TrainOutcome::Kind::kSucceeded) << outcome.message;
  ASSERT_EQ(recorder.samples.size(), 10u);
  EXPECT_EQ(recorder.samples[0].loss_scale, 1024);       // step 20
  EXPECT_EQ(recorder.samples[2].loss_scale, 2048);       // step 60
  EXPECT_EQ(recorder.samples.back().loss_scale, 16384);  // step 200: 4 growths
  EXPECT_EQ(recorder.samples.back().skipped_steps, 0u);
  EXPECT_LT(recorder.samples.back().loss, 0.7 * recorder.samples.front().loss);
  EXPECT_NE(recorder.logs[0].find("fp32 with loss scaling"), std::string::npos) << recorder.logs[0];
}

// A resumed fp16 job goes on with the scale it had learned, as if it had never stopped:
// the checkpoint keeps the scale, its count of clean steps and the skipped steps.
TEST(Fp16Job, AResumedJobKeepsItsLossScale) {
  stoke::testing::TempDir dir;
  TrainTask task = SmallJob(100);
  task.training.precision = Precision::kFp16;
  task.training.loss_scale.initial = 1024;
  task.training.loss_scale.growth_interval = 50;
  task.checkpoint.interval_steps = 100;
  task.job_dir = dir.path();
  std::atomic<bool> cancel{false};
  Recorder first;
  ASSERT_EQ(RunTraining(task, kCpu, first, cancel).kind, TrainOutcome::Kind::kSucceeded);
  ASSERT_FALSE(first.samples.empty());
  EXPECT_EQ(first.samples.back().loss_scale, 4096);  // grown after steps 50 and 100

  // The same job with 200 steps picks up after its checkpoint at step 100.
  task.training.steps = 200;
  Recorder second;
  ASSERT_EQ(RunTraining(task, kCpu, second, cancel).kind, TrainOutcome::Kind::kSucceeded);
  ASSERT_FALSE(second.samples.empty());
  EXPECT_EQ(second.samples.front().step, 120u);
  EXPECT_EQ(second.samples.front().loss_scale, 4096);
  // Grown after steps 150 and 200, as in a run of 200 steps that never stopped.
  EXPECT_EQ(second.samples.back().loss_scale, 16384);
  EXPECT_EQ(second.samples.back().skipped_steps, 0u);
}

// A trial that fits up to 300 samples, peaking at 1000 bytes + 10 per sample.
BatchTrial FitsUpTo300(int64_t batch) {
  if (batch > 300) return {false, 0, ""};
  return {true, static_cast<uint64_t>(1000 + 10 * batch), ""};
}

TEST(BatchSearch, FindsTheLargestFitAndKeepsTenPercentHeadroom) {
  const uint64_t capacity = 1000 + 10 * 300;  // 300 fills the device exactly
  const BatchSearchResult r = SearchBatchSize(FitsUpTo300, 1 << 20, capacity);
  EXPECT_EQ(r.largest_fitting, 300);
  // 0.9 * 4000 = 3600 bytes affords 260 samples; 256 is the multiple of 8 below.
  EXPECT_EQ(r.batch, 256);
  EXPECT_EQ(r.predicted_peak_bytes, 1000u + 10 * 256);
  EXPECT_LE(r.trials, 20);
}

TEST(BatchSearch, StopsAtTheLimitAndFailsClearlyWhenNothingFits) {
  const BatchSearchResult r = SearchBatchSize(
      [](int64_t b) {
        return BatchTrial{true, uint64_t(b), ""};
      },
      100, 1ull << 40);
  EXPECT_EQ(r.largest_fitting, 100);
  EXPECT_EQ(r.batch, 96);
  try {
    SearchBatchSize([](int64_t) { return BatchTrial{false, 0, ""}; }, 100, 1000);
    FAIL() << "expected an error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("training.batch_size"), std::string::npos) << e.what();
  }
}

// cuDNN's attention reports a failed workspace allocation as an execution error, not as
// out-of-memory: above batch 1 that is a batch that does not fit, and the log says why.
TEST(BatchSearch, OtherErrorsAboveBatchOneCountAsNotFittingAndAreReported) {
  const BatchSearchResult r = SearchBatchSize(
      [](int64_t b) {
        return b > 40 ? BatchTrial{false, 0, "mha_graph.execute failed"}
                      : BatchTrial{true, uint64_t(b), ""};
      },
      1000, 1ull << 40);
  EXPECT_EQ(r.largest_fitting, 40);
  EXPECT_EQ(r.first_failing, 41);
  EXPECT_NE(DescribeSearch(r, 1ull << 40).find("batch 41 failed with: mha_graph.execute failed"),
            std::string::npos)
      << DescribeSearch(r, 1ull << 40);
  EXPECT_THROW(SearchBatchSize(
                   [](int64_t) {
                     return BatchTrial{false, 0, "broken model"};
                   },
                   10, 1000),
               std::runtime_error);
}

TEST(BatchSearch, PlansAccumulationToTheEffectiveBatch) {
  AccumulationPlan p = PlanAccumulation(1024, 300, 1);
  EXPECT_EQ(p.batch * p.micro_steps, 1024);
  EXPECT_LE(p.batch, 300);
  EXPECT_EQ(p.micro_steps, 4);
  p = PlanAccumulation(1000, 300, 2);  // 500 per rank
  EXPECT_EQ(p.batch, 250);
  EXPECT_EQ(p.micro_steps, 2);
  EXPECT_EQ(p.effective, 1000);
  p = PlanAccumulation(997, 300, 1);  // prime: no exact split
  EXPECT_EQ(p.micro_steps, 4);
  EXPECT_EQ(p.batch, 250);
  EXPECT_EQ(p.effective, 1000);
  p = PlanAccumulation(64, 300, 1);
  EXPECT_EQ(p.batch, 64);
  EXPECT_EQ(p.micro_steps, 1);
}

TEST(BatchSearch, ARealTrialOnCpuMeasuresMemoryThatGrowsWithTheBatch) {
  torch::manual_seed(1);
  MlpConfig config;
  config.input_dim = 256;
  config.hidden = {1024};
  config.num_classes = 10;
  Mlp net(config);
  DataShape shape;
  shape.kind = DataShape::Kind::kVector;
  shape.sample = {256};
  shape.num_classes = 10;
  const BatchTrial small = MeasureBatch(*net, shape, kCpu, false, false, false, 16, 0);
  const BatchTrial large = MeasureBatch(*net, shape, kCpu, false, false, false, 8192, 0);
  ASSERT_TRUE(small.fits);
  ASSERT_TRUE(large.fits);
  // 8192 x (256 + 1024 + 10) floats of activations and their gradients: tens of MB more.
  EXPECT_GT(large.peak_bytes, small.peak_bytes + (16ull << 20));
  for (const auto& p : net->parameters()) EXPECT_FALSE(p.grad().defined());
}

TEST(AutoBatchJob, SearchesLogsTheChoiceAndTrains) {
  TrainTask task = SmallJob(40);
  task.training.batch_size = 0;
  task.training.batch_size_auto = true;
  task.training.effective_batch_size = 3000;
  Recorder recorder;
  std::atomic<bool> cancel{false};
  const TrainOutcome outcome = RunTraining(task, kCpu, recorder, cancel);
  ASSERT_EQ(outcome.kind, TrainOutcome::Kind::kSucceeded) << outcome.message;
  std::string search, plan, training;
  for (const auto& line : recorder.logs) {
    if (line.rfind("batch size search: ", 0) == 0) search = line;
    if (line.rfind("effective batch ", 0) == 0) plan = line;
    if (line.rfind("training ", 0) == 0) training = line;
  }
  // On CPU the search stops at 1024 samples, which a 16-64-4 MLP fits easily.
  EXPECT_NE(search.find("largest that fit: 1024"), std::string::npos) << search;
  EXPECT_EQ(plan, "effective batch 3000 = 1000 x 3 micro-steps x 1 ranks") << plan;
  EXPECT_NE(training.find("batch 1000 x 3 accumulated"), std::string::npos) << training;
  ASSERT_FALSE(recorder.samples.empty());
  EXPECT_GT(recorder.samples.back().samples_per_second, 0);
}

TEST(CudaGraphSwitch, OnACpuTheJobSaysWhyItTrainsEagerly) {
  TrainTask task = SmallJob(20);
  task.training.cuda_graph = Toggle::kOn;
  Recorder recorder;
  std::atomic<bool> cancel{false};
  ASSERT_EQ(RunTraining(task, kCpu, recorder, cancel).kind, TrainOutcome::Kind::kSucceeded);
  bool said = false;
  for (const auto& line : recorder.logs) {
    said |= line.find("training.cuda_graph: training eagerly: CUDA graphs need a CUDA device") !=
            std::string::npos;
  }
  EXPECT_TRUE(said);
}

}  // namespace
}  // namespace stoke::worker
