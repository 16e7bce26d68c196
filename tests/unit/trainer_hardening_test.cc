// The engine on inputs meant to hang or exhaust it: a TorchScript path that is a FIFO
// fails at once, a cancel during a long evaluation or a large file's preparation ends the
// run within seconds, and a model that cannot be allocated fails for good (no retry)
// saying what to make smaller.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "tests/support/recording_observer.h"
#include "tests/support/small_tasks.h"
#include "tests/support/temp_dir.h"
#include "worker/engine/trainer.h"

namespace stoke::worker {
namespace {

using std::chrono::seconds;
using Clock = std::chrono::steady_clock;

const DeviceRef kCpu{DeviceKind::kCpu, 0};

TEST(TrainerHardening, ATorchScriptPathThatIsAFifoFailsAtOnceNamingTheField) {
  stoke::testing::TempDir dir;
  const std::string fifo = dir.File("model.pt");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0644), 0);
  // Should the worker block in open() anyway, a writer comes after 20 s and lets it go,
  // so that the test fails instead of hanging.
  std::atomic<bool> done{false};
  std::thread rescue([&] {
    for (int i = 0; i < 200 && !done; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (done) return;
    const int fd = open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
    if (fd >= 0) close(fd);
  });
  TrainTask task = stoke::testing::SmallMlpTask(10);
  TorchScriptConfig model;
  model.path = fifo;
  model.input_shape = {16};
  model.num_classes = 4;
  task.model = model;
  task.data_roots = {dir.path()};
  stoke::testing::RecordingObserver observer;
  std::atomic<bool> cancel{false};
  const auto start = Clock::now();
  const TrainOutcome outcome = RunTraining(task, kCpu, observer, cancel);
  const auto took = Clock::now() - start;
  done = true;
  rescue.join();
  EXPECT_LT(took, seconds(5));
  EXPECT_EQ(outcome.kind, TrainOutcome::Kind::kFailed);
  EXPECT_FALSE(outcome.retryable) << outcome.message;
  EXPECT_NE(outcome.message.find("model.torchscript.path: " + fifo), std::string::npos)
      << outcome.message;
  EXPECT_NE(outcome.message.find("not a regular file (a FIFO)"), std::string::npos)
      << outcome.message;
}

// Sets the cancel flag a second after the first training sample (the step before the
// evaluation) and remembers when.
class CancelAfterFirstSample final : public TrainingObserver {
 public:
  explicit CancelAfterFirstSample(std::atomic<bool>& cancel)
      : cancel_(cancel), thread_([this] { Run(); }) {}
  ~CancelAfterFirstSample() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void OnStarted() override {}
  void OnMetrics(const MetricSample&) override {
    std::lock_guard<std::mutex> lock(mu_);
    seen_ = true;
    cv_.notify_all();
  }
  void OnLog(const std::string&) override {}
  // When the flag was set; nullopt if it never was.
  std::optional<Clock::time_point> cancelled_at() {
    std::lock_guard<std::mutex> lock(mu_);
    return cancelled_at_;
  }

 private:
  void Run() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return seen_ || stop_; });
    if (stop_) return;
    if (cv_.wait_for(lock, seconds(1), [&] { return stop_; })) return;
    cancelled_at_ = Clock::now();
    cancel_ = true;
  }

  std::atomic<bool>& cancel_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool seen_ = false;
  bool stop_ = false;
  std::optional<Clock::time_point> cancelled_at_;
  std::thread thread_;
};

// Runs `task` (a single training step, then an evaluation that would take minutes),
// cancels it a second into the evaluation and expects it to end within 10 s of that: a
// bound a loaded two-core machine meets, where the evaluation alone takes far longer.
void ExpectCancelledDuringEvaluation(const TrainTask& task) {
  std::atomic<bool> cancel{false};
  TrainOutcome outcome;
  Clock::time_point ended;
  std::optional<Clock::time_point> cancelled_at;
  {
    CancelAfterFirstSample observer(cancel);
    outcome = RunTraining(task, kCpu, observer, cancel);
    ended = Clock::now();
    cancelled_at = observer.cancelled_at();
  }
  ASSERT_TRUE(cancelled_at.has_value()) << "the run ended before the cancel: " << outcome.message;
  EXPECT_EQ(outcome.kind, TrainOutcome::Kind::kCancelled) << outcome.message;
  EXPECT_NE(outcome.message.find("evaluation"), std::string::npos) << outcome.message;
  EXPECT_LT(ended - *cancelled_at, seconds(10));
}

TEST(TrainerHardening, CancelDuringAnEvaluationOfManyBatchesEndsTheRunWithinSeconds) {
  TrainTask task = stoke::testing::SmallMlpTask(1);
  task.training.metrics_interval_steps = 1;
  // Held-out batches are drawn as the evaluation reaches them, so asking for four
  // billion of them costs nothing up front.
  task.eval.batches = 4'000'000'000u;
  ExpectCancelledDuringEvaluation(task);
}

TEST(TrainerHardening, CancelDuringTheEvaluationOfALargeTokenFileEndsTheRunWithinSeconds) {
  stoke::testing::TempDir dir;
  // 256 MiB of token 0, sparse: no disk is written, and the held-out tenth holds 840,000
  // windows of 16 tokens, minutes of evaluation on a CPU.
  const std::string path = dir.File("train.bin");
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, off_t{1} << 28), 0);
  close(fd);
  TrainTask task = stoke::testing::SmallMlpTask(1);
  GptConfig gpt;
  gpt.layers = 1;
  gpt.heads = 2;
  gpt.width = 32;
  task.model = gpt;
  TokenDataConfig tokens;
  tokens.train_path = path;
  tokens.context = 16;
  tokens.vocab_size = 64;
  task.data.source = tokens;
  task.data_roots = {dir.path()};
  task.training.metrics_interval_steps = 1;
  task.training.batch_size = 8;
  ExpectCancelledDuringEvaluation(task);
}

TEST(TrainerHardening, CancelWhileTheDataIsReadEndsTheRunAsCancelled) {
  stoke::testing::TempDir dir;
  const std::string path = dir.File("train.bin");
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, off_t{1} << 30), 0);
  close(fd);
  TrainTask task = stoke::testing::SmallMlpTask(1);
  task.model = GptConfig{};
  TokenDataConfig tokens;
  tokens.train_path = path;
  task.data.source = tokens;
  std::atomic<bool> cancel{true};  // cancelled before the file is checked
  stoke::testing::RecordingObserver observer;
  const TrainOutcome outcome = RunTraining(task, kCpu, observer, cancel);
  EXPECT_EQ(outcome.kind, TrainOutcome::Kind::kCancelled) << outcome.message;
  EXPECT_EQ(observer.started, 0);
}

// The coordinator checked the path when the job was submitted; a link to a file outside
// every root took its place before the worker opened it. The attempt fails for good and
// the message names the file, not its content.
TEST(TrainerHardening, ADataFileLinkedOutsideTheRootsAfterSubmissionIsRefused) {
  stoke::testing::TempDir root, elsewhere;
  const std::string secret = elsewhere.File("secret.bin");
  {
    const int fd = open(secret.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ASSERT_GE(fd, 0);
    const std::string bytes(4096, 'S');
    ASSERT_EQ(write(fd, bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
    close(fd);
  }
  const std::string link = root.File("train.bin");
  ASSERT_EQ(symlink(secret.c_str(), link.c_str()), 0);
  TrainTask task = stoke::testing::SmallMlpTask(1);
  task.model = GptConfig{};
  TokenDataConfig tokens;
  tokens.train_path = link;
  tokens.context = 16;
  task.data.source = tokens;
  task.data_roots = {root.path()};
  stoke::testing::RecordingObserver observer;
  std::atomic<bool> cancel{false};
  const TrainOutcome outcome = RunTraining(task, kCpu, observer, cancel);
  EXPECT_EQ(outcome.kind, TrainOutcome::Kind::kFailed);
  EXPECT_FALSE(outcome.retryable) << outcome.message;
  EXPECT_NE(outcome.message.find(link), std::string::npos) << outcome.message;
  EXPECT_NE(outcome.message.find("beneath none of the data roots"), std::string::npos)
      << outcome.message;
  EXPECT_EQ(outcome.message.find("SSSS"), std::string::npos) << outcome.message;
  EXPECT_EQ(observer.started, 0);
}

// 2^46 weights (256 TiB of fp32): more than the address space, so the allocator refuses
// at once whatever the machine's overcommit policy, and nothing is touched.
TEST(TrainerHardening, AModelThatCannotBeAllocatedFailsForGoodSayingWhatToReduce) {
  TrainTask task = stoke::testing::SmallMlpTask(10);
  std::get<MlpConfig>(task.model).hidden = {int64_t{1} << 42};
  stoke::testing::RecordingObserver observer;
  std::atomic<bool> cancel{false};
  const auto start = Clock::now();
  const TrainOutcome outcome = RunTraining(task, kCpu, observer, cancel);
  EXPECT_LT(Clock::now() - start, seconds(10));
  EXPECT_EQ(outcome.kind, TrainOutcome::Kind::kFailed);
  EXPECT_FALSE(outcome.retryable) << outcome.message;
  EXPECT_NE(outcome.message.find("out of memory while building the model"), std::string::npos)
      << outcome.message;
  EXPECT_NE(outcome.message.find("lower training.batch_size"), std::string::npos)
      << outcome.message;
  EXPECT_NE(outcome.message.find("make the model smaller"), std::string::npos) << outcome.message;
}

// Sizes whose product overflows 64 bits are refused before anything is allocated, naming
// the field, rather than wrapping around into a small, wrong layer.
TEST(TrainerHardening, LayerSizesThatOverflowAreRefusedNamingTheField) {
  TrainTask task = stoke::testing::SmallMlpTask(10);
  auto& mlp = std::get<MlpConfig>(task.model);
  mlp.input_dim = 0;  // from the data: 2^31 x 2^31 x 4 features
  SyntheticDataConfig images;
  images.image_shape = {int64_t{1} << 31, int64_t{1} << 31, 4};
  images.num_classes = 4;
  images.samples_per_epoch = 4096;
  task.data.source = images;
  stoke::testing::RecordingObserver observer;
  std::atomic<bool> cancel{false};
  const TrainOutcome outcome = RunTraining(task, kCpu, observer, cancel);
  EXPECT_EQ(outcome.kind, TrainOutcome::Kind::kFailed);
  EXPECT_FALSE(outcome.retryable) << outcome.message;
  EXPECT_NE(outcome.message.find("model.mlp"), std::string::npos) << outcome.message;
  EXPECT_NE(outcome.message.find("more than any device holds"), std::string::npos)
      << outcome.message;
}

}  // namespace
}  // namespace stoke::worker
