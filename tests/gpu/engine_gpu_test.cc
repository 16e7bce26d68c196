// The training engine's jobs on a CUDA device: real data with augmentation on the GPU,
// a language model on a token file, a ResNet, and resume from a checkpoint. Skips without
// CUDA (CI); on the GPU machine scripts/gpu-check.sh runs it (`ctest -L gpu`). Fashion-MNIST
// is read from $STOKE_FASHION_MNIST, else /usr/share/datasets/fashion-mnist.
#include <gtest/gtest.h>
#include <torch/cuda.h>

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <iostream>

#include "files/posix_files.h"
#include "formats/token_file.h"
#include "tests/support/recording_observer.h"
#include "tests/support/require_cuda.h"
#include "tests/support/temp_dir.h"
#include "worker/engine/trainer.h"

namespace stoke::worker {
namespace {

using stoke::testing::RecordingObserver;
const DeviceRef kGpu{DeviceKind::kCuda, 0};

class EngineGpuTest : public ::testing::Test {
 protected:
  void SetUp() override { STOKE_SKIP_WITHOUT_CUDA(); }
};

std::string FashionMnist() {
  const char* env = std::getenv("STOKE_FASHION_MNIST");
  return env ? env : "/usr/share/datasets/fashion-mnist";
}

TEST_F(EngineGpuTest, FashionMnistWithGpuAugmentationLearnsAndKeepsTheGpuFed) {
  if (!files::Exists(FashionMnist())) GTEST_SKIP() << "no Fashion-MNIST at " << FashionMnist();
  TrainTask task;
  task.name = "fashion-mnist-gpu";
  CnnConfig cnn;
  cnn.channels = {32, 64};
  task.model = cnn;
  task.data.source = MnistDataConfig{FashionMnist()};
  task.data.augment.crop_padding = 2;
  task.data.augment.horizontal_flip = true;
  task.optimizer.lr = 2e-3;
  task.optimizer.schedule = LrSchedule::kCosine;
  task.optimizer.warmup_steps = 50;
  task.training.epochs = 2;
  task.training.batch_size = 256;
  task.training.metrics_interval_steps = 20;
  RecordingObserver observer;
  std::atomic<bool> cancel{false};
  TrainOutcome outcome = RunTraining(task, kGpu, observer, cancel);
  ASSERT_EQ(outcome.kind, TrainOutcome::Kind::kSucceeded) << outcome.message;
  ASSERT_FALSE(observer.evals.empty());
  EXPECT_GE(observer.evals.back().eval->accuracy, 0.85);
  EXPECT_EQ(observer.evals.back().eval->samples, 10000u);
  double wait = 0;
  for (size_t i = 1; i < observer.samples.size(); ++i) wait += observer.samples[i].data_wait_ratio;
  wait /= static_cast<double>(observer.samples.size() - 1);
  std::cout << "fashion-mnist on cuda: accuracy " << observer.evals.back().eval->accuracy
            << ", mean data wait " << 100 * wait << "% of step time, "
            << observer.samples.back().samples_per_second << " samples/s\n";
}

TEST_F(EngineGpuTest, GptLearnsATokenFileInBf16) {
  stoke::testing::TempDir dir;
  // Text with structure to learn: the carried GPL if there is one, else a generated one.
  std::string text = dir.File("text.txt");
  const char* carried = std::getenv("STOKE_TEXT_FILE");
  if (carried && files::Exists(carried)) {
    text = carried;
  } else {
    std::ofstream out(text);
    for (int i = 0; i < 4000; ++i)
      out << "the quick brown fox " << i % 97 << " jumps over the lazy dog\n";
  }
  ASSERT_TRUE(data::TokenizeBytes(text, dir.File("tokens.bin")).ok());
  TrainTask task;
  task.name = "gpt-gpu";
  GptConfig gpt;
  gpt.layers = 4;
  gpt.heads = 4;
  gpt.width = 256;
  task.model = gpt;
  TokenDataConfig tokens;
  tokens.train_path = dir.File("tokens.bin");
  tokens.context = 128;
  task.data.source = tokens;
  task.optimizer.lr = 1e-3;
  task.optimizer.warmup_steps = 30;
  task.optimizer.schedule = LrSchedule::kCosine;
  task.optimizer.grad_clip_norm = 1.0;
  task.training.steps = 400;
  task.training.batch_size = 32;
  task.training.precision = Precision::kBf16;
  task.training.metrics_interval_steps = 50;
  task.eval.batches = 20;
  RecordingObserver observer;
  std::atomic<bool> cancel{false};
  TrainOutcome outcome = RunTraining(task, kGpu, observer, cancel);
  ASSERT_EQ(outcome.kind, TrainOutcome::Kind::kSucceeded) << outcome.message;
  ASSERT_EQ(observer.evals.size(), 1u);
  EXPECT_LT(observer.evals[0].eval->perplexity, 12) << "byte-level text: 256 when guessing";
  std::cout << "gpt on cuda: eval perplexity " << observer.evals[0].eval->perplexity << ", "
            << observer.samples.back().samples_per_second << " samples/s\n";
}

TEST_F(EngineGpuTest, ResNet50TrainsOnSyntheticImages) {
  TrainTask task;
  task.name = "resnet50-gpu";
  ResNetConfig resnet;
  resnet.depth = 50;
  task.model = resnet;
  SyntheticDataConfig images;
  images.image_shape = {3, 224, 224};
  images.num_classes = 1000;
  task.data.source = images;
  task.training.steps = 30;
  task.training.batch_size = 64;
  task.training.metrics_interval_steps = 10;
  task.eval.batches = 2;
  RecordingObserver observer;
  std::atomic<bool> cancel{false};
  TrainOutcome outcome = RunTraining(task, kGpu, observer, cancel);
  ASSERT_EQ(outcome.kind, TrainOutcome::Kind::kSucceeded) << outcome.message;
  ASSERT_EQ(observer.samples.size(), 3u);
  EXPECT_TRUE(std::isfinite(observer.samples.back().loss));
  std::cout << "resnet-50 on cuda (bf16 autocast, eager, batch 64): "
            << observer.samples.back().samples_per_second << " samples/s\n";
}

TEST_F(EngineGpuTest, ResumedTrainingOnCudaContinuesTheCurve) {
  TrainTask task;
  task.name = "resume-gpu";
  MlpConfig mlp;
  mlp.hidden = {512};
  mlp.dropout = 0.1;
  task.model = mlp;
  SyntheticDataConfig data;
  data.features = 64;
  task.data.source = data;
  task.training.steps = 60;
  task.training.batch_size = 128;
  task.training.precision = Precision::kFp32;
  task.training.metrics_interval_steps = 10;
  task.checkpoint.interval_steps = 30;
  stoke::testing::TempDir straight_dir, resumed_dir;
  std::atomic<bool> no{false};
  task.job_dir = straight_dir.path();
  RecordingObserver straight;
  ASSERT_EQ(RunTraining(task, kGpu, straight, no).kind, TrainOutcome::Kind::kSucceeded);

  class CancelAt30 final : public TrainingObserver {
   public:
    explicit CancelAt30(std::atomic<bool>& c) : cancel(c) {}
    void OnStarted() override {}
    void OnMetrics(const MetricSample& s) override {
      if (!s.eval && s.step >= 30) cancel = true;
    }
    void OnLog(const std::string&) override {}
    std::atomic<bool>& cancel;
  };
  task.job_dir = resumed_dir.path();
  std::atomic<bool> cancel{false};
  CancelAt30 first(cancel);
  ASSERT_EQ(RunTraining(task, kGpu, first, cancel).kind, TrainOutcome::Kind::kCancelled);
  RecordingObserver second;
  ASSERT_EQ(RunTraining(task, kGpu, second, no).kind, TrainOutcome::Kind::kSucceeded);
  ASSERT_EQ(second.samples.front().step, 40u);
  for (const auto& s : second.samples) {
    const auto& o = straight.samples[s.step / 10 - 1];
    EXPECT_NEAR(s.loss, o.loss, 1e-4 * std::abs(o.loss)) << "step " << s.step;
  }
}

}  // namespace
}  // namespace stoke::worker
