// The training engine on CPU: it learns, reports in order without gaps, stops when
// cancelled, fails clearly (and for good) when the loss diverges or the spec is wrong,
// and retryably when its data is not there yet.
#include "worker/engine/trainer.h"

#include <gtest/gtest.h>
#include <torch/script.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <vector>

#include "files/posix_files.h"
#include "tests/support/data_files.h"
#include "tests/support/recording_observer.h"
#include "tests/support/small_tasks.h"
#include "tests/support/temp_dir.h"

namespace stoke::worker {
namespace {

using stoke::testing::RecordingObserver;

TrainTask SmallTask(uint64_t steps) { return stoke::testing::SmallMlpTask(steps); }

const DeviceRef kCpu{DeviceKind::kCpu, 0};

TEST(Trainer, LossFallsOnLearnableData) {
  RecordingObserver observer;
  std::atomic<bool> cancel{false};
  TrainOutcome outcome = RunTraining(SmallTask(300), kCpu, observer, cancel);
  ASSERT_EQ(outcome.kind, TrainOutcome::Kind::kSucceeded) << outcome.message;
  EXPECT_EQ(observer.started, 1);
  ASSERT_EQ(observer.samples.size(), 15u);
  EXPECT_LT(observer.samples.back().loss, 0.6 * observer.samples.front().loss)
      << "first " << observer.samples.front().loss << ", last " << observer.samples.back().loss;
  // Evaluated once, at the end, on held-out samples labelled by the same rule.
  ASSERT_EQ(observer.evals.size(), 1u);
  EXPECT_EQ(observer.evals[0].step, 300u);
  EXPECT_GT(observer.evals[0].eval->accuracy, 0.8);
}

// Synthetic images carry their class in their channel means, so that an image job's loss
// curve means something: a small CNN goes well past chance on held-out images.
TEST(Trainer, SyntheticImagesAreLearnable) {
  TrainTask task = SmallTask(80);
  CnnConfig cnn;
  cnn.channels = {8};
  cnn.hidden = 16;
  task.model = cnn;
  SyntheticDataConfig images;
  images.image_shape = {3, 16, 16};
  images.num_classes = 10;
  task.data.source = images;
  RecordingObserver observer;
  std::atomic<bool> cancel{false};
  TrainOutcome outcome = RunTraining(task, kCpu, observer, cancel);
  ASSERT_EQ(outcome.kind, TrainOutcome::Kind::kSucceeded) << outcome.message;
  ASSERT_FALSE(observer.samples.empty());
  EXPECT_LT(observer.samples.back().loss, 0.7 * observer.samples.front().loss)
      << "first " << observer.samples.front().loss << ", last " << observer.samples.back().loss;
  ASSERT_EQ(observer.evals.size(), 1u);
  EXPECT_GT(observer.evals[0].eval->accuracy, 0.5) << "chance is 0.1";
}

TEST(Trainer, SamplesComeEveryIntervalInOrderWithTheLastStep) {
  RecordingObserver observer;
  std::atomic<bool> cancel{false};
  TrainTask task = SmallTask(50);
  task.training.metrics_interval_steps = 20;
  ASSERT_EQ(RunTraining(task, kCpu, observer, cancel).kind, TrainOutcome::Kind::kSucceeded);
  std::vector<uint64_t> steps;
  for (const auto& s : observer.samples) {
    steps.push_back(s.step);
    EXPECT_EQ(s.total_steps, 50u);
    EXPECT_GT(s.samples_per_second, 0);
    EXPECT_GT(s.elapsed_seconds, 0);
  }
  EXPECT_EQ(steps, (std::vector<uint64_t>{20, 40, 50}));
}

// What `stoke status` shows as the start-up comes from here: once per run, after the
// first step, with the build's parts.
TEST(Trainer, TheFirstStepIsReportedOnceWithWhereTheStartUpWent) {
  RecordingObserver observer;
  std::atomic<bool> cancel{false};
  const auto began = std::chrono::steady_clock::now();
  ASSERT_EQ(RunTraining(SmallTask(30), kCpu, observer, cancel).kind,
            TrainOutcome::Kind::kSucceeded);
  ASSERT_EQ(observer.first_steps.size(), 1u);
  const StartupTimes& times = observer.first_steps[0];
  EXPECT_GT(times.first_step_seconds, 0);
  EXPECT_GT(times.model_seconds, 0);
  EXPECT_GE(times.data_seconds, 0);
  EXPECT_EQ(times.batch_search_seconds, 0) << "no batch search was asked for";
  EXPECT_GT(times.completed_at, began);
  EXPECT_LT(times.completed_at, std::chrono::steady_clock::now());
}

TEST(Trainer, EpochsBecomeWholeStepsOverTheData) {
  TrainTask task = SmallTask(0);
  task.training.epochs = 3;
  task.training.batch_size = 100;
  task.training.grad_accum_steps = 2;
  // 4096 samples / 100 = 40 whole batches, 20 steps of 2 batches, per epoch.
  EXPECT_EQ(TotalSteps(task, 40), 60u);
  RecordingObserver observer;
  std::atomic<bool> cancel{false};
  ASSERT_EQ(RunTraining(task, kCpu, observer, cancel).kind, TrainOutcome::Kind::kSucceeded);
  EXPECT_EQ(observer.samples.back().step, 60u);
  EXPECT_EQ(observer.samples.back().epoch, 2u);
}

TEST(Trainer, CancelStopsBeforeTheNextStep) {
  class CancelOnFirstSample final : public TrainingObserver {
   public:
    explicit CancelOnFirstSample(std::atomic<bool>& cancel) : cancel_(cancel) {}
    void OnStarted() override {}
    void OnMetrics(const MetricSample& sample) override {
      last_step = sample.step;
      cancel_ = true;
    }
    void OnLog(const std::string&) override {}
    uint64_t last_step = 0;

   private:
    std::atomic<bool>& cancel_;
  };
  std::atomic<bool> cancel{false};
  CancelOnFirstSample observer(cancel);
  TrainTask task = SmallTask(1'000'000);
  task.training.metrics_interval_steps = 5;
  TrainOutcome outcome = RunTraining(task, kCpu, observer, cancel);
  EXPECT_EQ(outcome.kind, TrainOutcome::Kind::kCancelled);
  EXPECT_LT(observer.last_step, 100u);
}

TEST(Trainer, DivergingLossFailsWithoutRetry) {
  TrainTask task = SmallTask(200);
  task.optimizer.kind = SgdConfig{0.0, false};
  task.optimizer.lr = 1e12;
  RecordingObserver observer;
  std::atomic<bool> cancel{false};
  TrainOutcome outcome = RunTraining(task, kCpu, observer, cancel);
  EXPECT_EQ(outcome.kind, TrainOutcome::Kind::kFailed);
  EXPECT_FALSE(outcome.retryable);
  EXPECT_NE(outcome.message.find("loss became"), std::string::npos) << outcome.message;
}

TEST(Trainer, MissingDeviceFailsNamingIt) {
  RecordingObserver observer;
  std::atomic<bool> cancel{false};
  TrainOutcome outcome =
      RunTraining(SmallTask(10), DeviceRef{DeviceKind::kCuda, 7}, observer, cancel);
  EXPECT_EQ(outcome.kind, TrainOutcome::Kind::kFailed);
  EXPECT_NE(outcome.message.find("cuda:7"), std::string::npos) << outcome.message;
}

// A data path that is not there yet (a file system still being mounted) may be there for
// the next attempt: the failure is retried. Its message names the path.
TEST(Trainer, ADataPathThatDoesNotExistYetIsRetried) {
  stoke::testing::TempDir dir;
  TrainTask task = SmallTask(10);
  task.model = GptConfig{};
  TokenDataConfig tokens;
  tokens.train_path = dir.File("not-mounted-yet/train.bin");
  tokens.context = 16;
  task.data.source = tokens;
  RecordingObserver observer;
  std::atomic<bool> cancel{false};
  TrainOutcome outcome = RunTraining(task, kCpu, observer, cancel);
  EXPECT_EQ(outcome.kind, TrainOutcome::Kind::kFailed);
  EXPECT_TRUE(outcome.retryable) << outcome.message;
  EXPECT_NE(outcome.message.find("not-mounted-yet/train.bin"), std::string::npos)
      << outcome.message;
}

// What no later attempt can fix fails at once: data that is not what the spec says it
// is (a folder where a token file should be), or a model that cannot take the data.
TEST(Trainer, AnInvalidSpecIsNotRetried) {
  stoke::testing::TempDir dir;
  TrainTask tokens_task = SmallTask(10);
  tokens_task.model = GptConfig{};
  TokenDataConfig tokens;
  tokens.train_path = dir.path();
  tokens_task.data.source = tokens;
  TrainTask model_task = SmallTask(10);
  model_task.model = GptConfig{};  // a language model on labelled vectors
  for (const TrainTask& task : {tokens_task, model_task}) {
    RecordingObserver observer;
    std::atomic<bool> cancel{false};
    TrainOutcome outcome = RunTraining(task, kCpu, observer, cancel);
    EXPECT_EQ(outcome.kind, TrainOutcome::Kind::kFailed);
    EXPECT_FALSE(outcome.retryable) << outcome.message;
  }
}

}  // namespace
}  // namespace stoke::worker

namespace stoke::worker {
namespace {

// Records training samples and cancels once a given step has been reported.
class StopAfter final : public TrainingObserver {
 public:
  StopAfter(std::atomic<bool>& cancel, uint64_t step) : cancel_(cancel), stop_step_(step) {}
  void OnStarted() override {}
  void OnMetrics(const MetricSample& sample) override {
    if (sample.eval) return;
    samples.push_back(sample);
    if (stop_step_ > 0 && sample.step >= stop_step_) cancel_ = true;
  }
  void OnLog(const std::string& line) override { logs.push_back(line); }
  std::vector<MetricSample> samples;
  std::vector<std::string> logs;

 private:
  std::atomic<bool>& cancel_;
  uint64_t stop_step_;
};

// A checkpoint due sooner than min_interval_seconds after the start or the last one is
// skipped; the last step's is written all the same.
TEST(Trainer, CheckpointsComeNoFasterThanTheirMinimumInterval) {
  TrainTask task = SmallTask(20);
  task.checkpoint.interval_steps = 1;
  task.checkpoint.keep = 100;
  stoke::testing::TempDir paced, unpaced;
  std::atomic<bool> no_cancel{false};
  for (auto [dir, seconds] : {std::pair{&paced, 3600u}, std::pair{&unpaced, 0u}}) {
    task.job_dir = dir->path();
    task.checkpoint.min_interval_seconds = seconds;
    StopAfter run(no_cancel, 0);
    ASSERT_EQ(RunTraining(task, kCpu, run, no_cancel).kind, TrainOutcome::Kind::kSucceeded);
  }
  EXPECT_EQ(files::ListDirectory(paced.path() + "/checkpoints"),
            std::vector<std::string>{"step-20"});
  EXPECT_EQ(files::ListDirectory(unpaced.path() + "/checkpoints").size(), 20u);
}

TEST(Trainer, ResumedTrainingContinuesTheSameLossCurve) {
  TrainTask task = SmallTask(90);
  task.training.metrics_interval_steps = 10;
  std::get<MlpConfig>(task.model).dropout = 0.2;  // uses the generator the checkpoint restores
  task.optimizer.schedule = LrSchedule::kCosine;
  task.optimizer.warmup_steps = 10;
  task.checkpoint.interval_steps = 30;
  task.checkpoint.keep = 2;

  stoke::testing::TempDir straight_dir, resumed_dir;
  std::atomic<bool> no_cancel{false};
  task.job_dir = straight_dir.path();
  StopAfter straight(no_cancel, 0);
  ASSERT_EQ(RunTraining(task, kCpu, straight, no_cancel).kind, TrainOutcome::Kind::kSucceeded);

  // The same job stopped after its checkpoint at step 30 (as if its worker died), then
  // started again: it must pick up at step 31 and retrace the same curve.
  task.job_dir = resumed_dir.path();
  std::atomic<bool> cancel{false};
  StopAfter first(cancel, 30);
  ASSERT_EQ(RunTraining(task, kCpu, first, cancel).kind, TrainOutcome::Kind::kCancelled);
  std::atomic<bool> go_on{false};
  StopAfter second(go_on, 0);
  ASSERT_EQ(RunTraining(task, kCpu, second, go_on).kind, TrainOutcome::Kind::kSucceeded);
  ASSERT_GE(second.logs.size(), 2u);
  EXPECT_EQ(second.logs[1], "resumed from checkpoint at step 30");

  ASSERT_EQ(second.samples.front().step, 40u);
  for (const MetricSample& resumed : second.samples) {
    const MetricSample& original = straight.samples[resumed.step / 10 - 1];
    ASSERT_EQ(original.step, resumed.step);
    EXPECT_EQ(original.loss, resumed.loss) << "step " << resumed.step;
    EXPECT_EQ(original.learning_rate, resumed.learning_rate) << "step " << resumed.step;
  }
  // Only the newest two checkpoints are kept.
  std::vector<std::string> kept = files::ListDirectory(resumed_dir.path() + "/checkpoints");
  std::sort(kept.begin(), kept.end());
  EXPECT_EQ(kept, (std::vector<std::string>{"step-60", "step-90"}));
}

// A preemption stops the run after the step asked for (or the step under way), with a
// checkpoint of exactly that step and its metrics reported up to it: resumed, the job
// loses no step and retraces the curve of a run that was never stopped, step for step.
TEST(Trainer, APreemptedRunStopsAtItsStepBoundaryAndResumesWithoutLosingAStep) {
  TrainTask task = SmallTask(60);
  task.training.metrics_interval_steps = 1;
  std::get<MlpConfig>(task.model).dropout = 0.2;
  task.optimizer.schedule = LrSchedule::kCosine;
  task.checkpoint.interval_steps = 25;
  task.checkpoint.keep = 10;
  std::atomic<bool> no_cancel{false};

  stoke::testing::TempDir straight_dir, preempted_dir;
  task.job_dir = straight_dir.path();
  StopAfter straight(no_cancel, 0);
  ASSERT_EQ(RunTraining(task, kCpu, straight, no_cancel).kind, TrainOutcome::Kind::kSucceeded);
  ASSERT_EQ(straight.samples.size(), 60u);

  task.job_dir = preempted_dir.path();
  std::vector<MetricSample> curve;
  // First asked to stop after step 17 (as the ranks of a job of several are), then, once
  // resumed, after the step under way at step 41.
  std::atomic<uint64_t> preempt_after{17};
  TrainingProbe probe;
  probe.preempt_after = &preempt_after;
  StopAfter first(no_cancel, 0);
  const TrainOutcome stopped = RunTraining(task, kCpu, first, no_cancel, probe);
  ASSERT_EQ(stopped.kind, TrainOutcome::Kind::kPreempted) << stopped.message;
  EXPECT_EQ(stopped.message, "preempted after step 17, its checkpoint written");
  EXPECT_EQ(files::ListDirectory(preempted_dir.path() + "/checkpoints"),
            std::vector<std::string>{"step-17"});
  curve.insert(curve.end(), first.samples.begin(), first.samples.end());

  preempt_after = TaskStops::kNotPreempted;
  probe.before_step = [&](uint64_t step) {
    if (step == 41) preempt_after = 0;
  };
  StopAfter second(no_cancel, 0);
  ASSERT_EQ(RunTraining(task, kCpu, second, no_cancel, probe).kind, TrainOutcome::Kind::kPreempted);
  EXPECT_EQ(second.logs[1], "resumed from checkpoint at step 17");
  curve.insert(curve.end(), second.samples.begin(), second.samples.end());

  preempt_after = TaskStops::kNotPreempted;
  probe.before_step = nullptr;
  StopAfter third(no_cancel, 0);
  ASSERT_EQ(RunTraining(task, kCpu, third, no_cancel, probe).kind, TrainOutcome::Kind::kSucceeded);
  EXPECT_EQ(third.logs[1], "resumed from checkpoint at step 41");
  curve.insert(curve.end(), third.samples.begin(), third.samples.end());

  ASSERT_EQ(curve.size(), straight.samples.size());
  for (size_t i = 0; i < curve.size(); ++i) {
    ASSERT_EQ(curve[i].step, i + 1);
    EXPECT_EQ(curve[i].loss, straight.samples[i].loss) << "step " << i + 1;
    EXPECT_EQ(curve[i].learning_rate, straight.samples[i].learning_rate) << "step " << i + 1;
  }
}

}  // namespace
}  // namespace stoke::worker

namespace stoke::worker {
namespace {

TEST(Trainer, TrainsAUsersTorchScriptModelOnDataShapedForIt) {
  stoke::testing::TempDir dir;
  // A user's model, made without Python: a linear regression from 8 inputs to 3 outputs.
  torch::jit::Module user("Regression");
  user.register_parameter("w", torch::zeros({8, 3}), false);
  user.define(R"(
def forward(self, x):
  return x.mm(self.w)
)");
  user.save(dir.File("model.pt"));

  TrainTask task = SmallTask(200);
  TorchScriptConfig model;
  model.path = dir.File("model.pt");
  model.loss = LossKind::kMse;
  model.input_shape = {8};
  model.target_shape = {3};
  task.model = model;
  task.optimizer.lr = 0.05;
  RecordingObserver observer;
  std::atomic<bool> cancel{false};
  TrainOutcome outcome = RunTraining(task, kCpu, observer, cancel);
  ASSERT_EQ(outcome.kind, TrainOutcome::Kind::kSucceeded) << outcome.message;
  ASSERT_FALSE(observer.samples.empty());
  EXPECT_LT(observer.samples.back().loss, 0.05 * observer.samples.front().loss)
      << "first " << observer.samples.front().loss << ", last " << observer.samples.back().loss;
  ASSERT_EQ(observer.evals.size(), 1u);
  EXPECT_EQ(observer.evals[0].eval->accuracy, 0) << "no accuracy for a regression";
}

}  // namespace
}  // namespace stoke::worker

namespace stoke::worker {
namespace {

// Final parameters of a small MLP trained on an MNIST-format folder through the loader,
// whose sampler fixes which samples each (micro-)batch holds.
std::vector<torch::Tensor> TrainOnImages(const std::string& folder, int64_t batch, int64_t accum,
                                         uint64_t steps) {
  TrainTask task;
  task.job_id = "accum";
  task.name = "accum";
  MlpConfig mlp;
  mlp.hidden = {32};
  task.model = mlp;
  task.data.source = MnistDataConfig{folder};
  task.data.loader.threads = 1;
  OptimizerConfig optimizer;
  optimizer.kind = SgdConfig{0.9, false};
  optimizer.lr = 0.05;
  task.optimizer = optimizer;
  task.training.steps = steps;
  task.training.batch_size = batch;
  task.training.grad_accum_steps = accum;
  task.training.precision = Precision::kFp32;
  task.training.seed = 3;
  task.eval.batches = 1;
  std::vector<torch::Tensor> out;
  TrainingProbe probe;
  probe.on_finished = [&](const std::vector<torch::Tensor>& parameters) {
    for (const auto& p : parameters) out.push_back(p.detach().clone());
  };
  RecordingObserver observer;
  std::atomic<bool> cancel{false};
  EXPECT_EQ(RunTraining(task, kCpu, observer, cancel, probe).kind, TrainOutcome::Kind::kSucceeded);
  return out;
}

TEST(Trainer, FourAccumulatedMicroBatchesMatchOneBatchFourTimesAsLarge) {
  stoke::testing::TempDir dir;
  const std::string folder = dir.File("images");
  std::string error;
  ASSERT_TRUE(files::MakeDirectories(folder, &error)) << error;
  stoke::testing::WriteMnistFolder(folder, stoke::testing::PatternImages(96, 8, 8, 10),
                                   stoke::testing::PatternImages(16, 8, 8, 10, 5));
  // 9 steps of 16 samples: one and a half epochs of 96, so the reshuffle is crossed too.
  const auto whole = TrainOnImages(folder, 16, 1, 9);
  const auto accumulated = TrainOnImages(folder, 4, 4, 9);
  const auto untouched = TrainOnImages(folder, 16, 1, 1);
  ASSERT_EQ(whole.size(), accumulated.size());
  for (size_t i = 0; i < whole.size(); ++i) {
    EXPECT_TRUE(torch::allclose(whole[i], accumulated[i], 1e-4, 1e-5))
        << "parameter " << i << " differs by "
        << (whole[i] - accumulated[i]).abs().max().item<float>();
  }
  // And the comparison is not between two models training left alone.
  EXPECT_FALSE(torch::allclose(whole[0], untouched[0], 1e-3, 1e-3));
}

}  // namespace
}  // namespace stoke::worker
