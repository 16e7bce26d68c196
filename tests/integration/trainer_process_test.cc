// The user's models in the training process (stoke-trainer), as the worker runs them: a
// Python model trains with the same loss curve as a plain PyTorch loop, reports through
// the worker, and whatever its code does (raise, crash, hang) ends the attempt with a
// clear message and never the caller. Real child processes, Debian's torch.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "absl/strings/str_split.h"
#include "files/posix_files.h"
#include "tests/support/recording_observer.h"
#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"
#include "tests/support/trainer_jobs.h"
#include "worker/link/trainer_process.h"

namespace stoke::testing {
namespace {

using worker::TrainOutcome;

constexpr const char* kFashionMnist = "/usr/share/datasets/fashion-mnist";

// A small classifier of 16 features, which may misbehave on purpose at a given step.
constexpr const char* kModel = R"PY(
import os, signal, time
import torch
from torch import nn

class Net(nn.Module):
    def __init__(self, crash_at=0, raise_at=0, hang_at=0):
        super().__init__()
        self.a, self.b = nn.Linear(16, 32), nn.Linear(32, 4)
        self.calls, self.crash_at, self.raise_at, self.hang_at = 0, crash_at, raise_at, hang_at

    def forward(self, x):
        if self.training:
            self.calls += 1
            if self.calls == self.crash_at:
                os.kill(os.getpid(), signal.SIGSEGV)
            if self.calls == self.raise_at:
                raise RuntimeError("the model gave up at call %d" % self.calls)
            if self.calls == self.hang_at:
                time.sleep(3600)
        return self.b(torch.relu(self.a(x)))

def build_model(**args):
    return Net(**args)

def broken_model(**args):
    raise ValueError("width must be even")
)PY";

// SIGKILL to this process's children of that name (/proc/PID/stat: "pid (comm) state
// ppid ..."); how many there were.
int KillChildren(const std::string& name) {
  int killed = 0;
  for (const std::string& entry : files::ListDirectory("/proc")) {
    if (entry.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat("/proc/" + entry + "/stat");
    std::string line;
    std::getline(stat, line);
    const size_t open = line.find('('), close = line.rfind(')');
    if (open == std::string::npos || close == std::string::npos) continue;
    std::istringstream rest(line.substr(close + 2));
    std::string state;
    pid_t parent = 0;
    rest >> state >> parent;
    if (parent == getpid() && line.substr(open + 1, close - open - 1) == name && state != "Z") {
      killed += kill(std::stoi(entry), SIGKILL) == 0;
    }
  }
  return killed;
}

class TrainerProcessTest : public ::testing::Test {
 protected:
  std::string WriteFile(const std::string& name, const std::string& text) {
    std::ofstream(dir_.File(name)) << text;
    return dir_.File(name);
  }

  stoke::v1::Assignment Assign(const std::string& yaml) {
    // A folder of its own per job: a later job must not resume from an earlier one's
    // checkpoint.
    return AssignJob(yaml, dir_.path(), dir_.File("job-" + std::to_string(++jobs_)));
  }

  TrainOutcome Train(const stoke::v1::Assignment& assignment,
                     std::chrono::milliseconds cancel_after = std::chrono::hours(1)) {
    const TrainerRun run = TrainInTrainer(assignment, "cpu:0", observer_, cancel_after);
    seconds_ = run.seconds;
    return run.outcome;
  }

  std::string Logs() const {
    std::string all;
    for (const auto& line : observer_.logs) all += line + "\n";
    return all;
  }

  static std::string SyntheticJob(const std::string& args, int steps) {
    return "model:\n  python: {file: model.py, args: " + args +
           "}\ndata:\n  synthetic: {features: 16, num_classes: 4}\ntraining:\n  steps: " +
           std::to_string(steps) + "\n  batch_size: 32\nmetrics:\n  interval_steps: 5\n";
  }

  TempDir dir_;
  RecordingObserver observer_;
  double seconds_ = 0;
  int jobs_ = 0;
};

TEST_F(TrainerProcessTest, PythonModelTrainsAndReportsThroughTheWorker) {
  WriteFile("model.py", kModel);
  const TrainOutcome outcome = Train(Assign(SyntheticJob("{}", 60)));
  ASSERT_EQ(outcome.kind, TrainOutcome::Kind::kSucceeded) << outcome.message << "\n" << Logs();
  EXPECT_EQ(observer_.started, 1);
  ASSERT_EQ(observer_.samples.size(), 12u);
  EXPECT_EQ(observer_.samples.back().step, 60u);
  EXPECT_LT(observer_.samples.back().loss, observer_.samples.front().loss);
  ASSERT_EQ(observer_.evals.size(), 1u);
  EXPECT_GT(observer_.evals[0].eval->accuracy, 0.4);
  ASSERT_EQ(observer_.first_steps.size(), 1u);
  EXPECT_GT(observer_.first_steps[0].process_seconds, 0.0);
  EXPECT_NE(Logs().find("model.python: not compiled"), std::string::npos) << Logs();
  // The code went into the attempt's folder, for each rank its own.
  std::ifstream written(dir_.File("job-1/attempts/1/rank-0/code/model.py"));
  EXPECT_TRUE(written.good());
}

// The user's code runs in its attempt's folder, not in the worker's working directory
// (whose files are not the user's to open or import by a relative name).
TEST_F(TrainerProcessTest, TheModelRunsInItsAttemptsFolder) {
  WriteFile("model.py", std::string(kModel) +
                            "\nimport os\ndef here(**args):\n"
                            "    assert os.getcwd().endswith('/job-1/attempts/1/rank-0'), "
                            "os.getcwd()\n    return Net(**args)\n");
  const TrainOutcome outcome =
      Train(Assign("model:\n  python: {file: model.py, factory: here}\ndata:\n  synthetic: "
                   "{features: 16, num_classes: 4}\ntraining: {steps: 2, batch_size: 8}\n"));
  EXPECT_EQ(outcome.kind, TrainOutcome::Kind::kSucceeded) << outcome.message << "\n" << Logs();
}

// Same model, seed, optimizer and batches as a plain PyTorch eager loop on Fashion-MNIST:
// the same loss at every one of 200 steps, within bf16's tolerance.
TEST_F(TrainerProcessTest, LossCurveMatchesAPlainPyTorchLoopOverTwoHundredSteps) {
  const std::string model = WriteFile("cnn.py", R"PY(
import torch
from torch import nn

def build_model():
    return nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(16 * 7 * 7, 10))
)PY");
  const int steps = 200, batch = 32;
  TrainOutcome outcome = Train(Assign(
      "model:\n  python: {file: cnn.py}\ndata:\n  mnist: {path: " + std::string(kFashionMnist) +
      "}\n  loader: {shuffle: false}\ntraining:\n  steps: " + std::to_string(steps) +
      "\n  batch_size: " + std::to_string(batch) +
      "\noptimizer: {lr: 0.001}\nmetrics: {interval_steps: 1}\neval: {batches: 1}\n"));
  ASSERT_EQ(outcome.kind, TrainOutcome::Kind::kSucceeded) << outcome.message << "\n" << Logs();
  ASSERT_EQ(observer_.samples.size(), static_cast<size_t>(steps));

  const CommandResult reference =
      RunCommand({"/usr/bin/python3",
                  std::string(STOKE_SOURCE_DIR) + "/tests/support/python_reference_loop.py", model,
                  kFashionMnist, std::to_string(steps), std::to_string(batch), "0.001"});
  ASSERT_EQ(reference.exit_code, 0) << reference.err;
  std::string list = reference.out;
  list.erase(std::remove_if(list.begin(), list.end(),
                            [](char c) { return c == '[' || c == ']' || c == '\n'; }),
             list.end());
  const std::vector<std::string> values = absl::StrSplit(list, ", ");
  ASSERT_EQ(values.size(), static_cast<size_t>(steps)) << reference.out;
  double worst = 0;
  for (int i = 0; i < steps; ++i) {
    const double expected = std::stod(values[i]);
    const double got = observer_.samples[i].loss;
    worst = std::max(worst, std::abs(got - expected) / std::max(1.0, std::abs(expected)));
    EXPECT_NEAR(got, expected, 1e-2 * std::max(1.0, std::abs(expected))) << "at step " << i + 1;
  }
  // The loop learns: the curve is not flat.
  EXPECT_LT(observer_.samples.back().loss, 0.6 * observer_.samples.front().loss);
  std::printf("largest relative difference over %d steps: %.2e\n", steps, worst);
}

TEST_F(TrainerProcessTest, ModelThatComputesItsOwnLossTrainsAndIsEvaluated) {
  WriteFile("lm.py", R"PY(
import torch
import torch.nn.functional as F
from torch import nn

class Bigram(nn.Module):
    def __init__(self, vocab):
        super().__init__()
        self.table = nn.Embedding(vocab, vocab)
    def forward(self, tokens, targets=None):
        logits = self.table(tokens)
        if targets is None:
            return logits
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.reshape(-1))

def build_model(vocab=64):
    return Bigram(vocab)
)PY");
  const TrainOutcome outcome =
      Train(Assign("model:\n  python: {file: lm.py, args: {vocab: 64}, loss: model}\n"
                   "data:\n  synthetic: {vocab_size: 64, context: 16}\noptimizer: {lr: 0.05}\n"
                   "training:\n  steps: 80\n  batch_size: 16\nmetrics: {interval_steps: 10}\n"));
  ASSERT_EQ(outcome.kind, TrainOutcome::Kind::kSucceeded) << outcome.message << "\n" << Logs();
  // Each next token follows from the last: a bigram table learns the rule.
  EXPECT_LT(observer_.samples.back().loss, 0.5 * observer_.samples.front().loss);
  ASSERT_EQ(observer_.evals.size(), 1u);
  EXPECT_GT(observer_.evals[0].eval->perplexity, 0.0);
  EXPECT_LT(observer_.evals[0].eval->loss, observer_.samples.front().loss);
}

TEST_F(TrainerProcessTest, CrashInTheModelFailsTheAttemptNamingTheSignalAndStep) {
  WriteFile("model.py", kModel);
  const TrainOutcome outcome = Train(Assign(SyntheticJob("{crash_at: 7}", 60)));
  ASSERT_EQ(outcome.kind, TrainOutcome::Kind::kFailed);
  EXPECT_NE(outcome.message.find("the training process died: signal 11 (Segmentation fault) "
                                 "at step 7"),
            std::string::npos)
      << outcome.message;
  EXPECT_TRUE(outcome.retryable);  // past its first step: not certain to come again
  EXPECT_LT(seconds_, 30.0);
}

TEST_F(TrainerProcessTest, CrashAtTheFirstStepIsNotRetried) {
  WriteFile("model.py", kModel);
  const TrainOutcome outcome = Train(Assign(SyntheticJob("{crash_at: 1}", 20)));
  ASSERT_EQ(outcome.kind, TrainOutcome::Kind::kFailed);
  EXPECT_NE(outcome.message.find("signal 11"), std::string::npos) << outcome.message;
  EXPECT_FALSE(outcome.retryable);
}

TEST_F(TrainerProcessTest, ExceptionWhileBuildingIsNotRetriedAndItsTracebackIsLogged) {
  WriteFile("model.py", kModel);
  auto assignment = Assign(SyntheticJob("{}", 20));
  assignment.mutable_spec()->mutable_model()->mutable_python()->set_factory("broken_model");
  const TrainOutcome outcome = Train(assignment);
  ASSERT_EQ(outcome.kind, TrainOutcome::Kind::kFailed);
  EXPECT_NE(outcome.message.find("ValueError: width must be even"), std::string::npos)
      << outcome.message;
  EXPECT_NE(outcome.message.find("while building the model"), std::string::npos) << outcome.message;
  EXPECT_FALSE(outcome.retryable);
  EXPECT_NE(Logs().find("Traceback (most recent call last)"), std::string::npos) << Logs();
  EXPECT_NE(Logs().find("in broken_model"), std::string::npos) << Logs();
}

TEST_F(TrainerProcessTest, ExceptionAfterTheFirstStepFailsTheAttemptRetryably) {
  WriteFile("model.py", kModel);
  const TrainOutcome outcome = Train(Assign(SyntheticJob("{raise_at: 12}", 40)));
  ASSERT_EQ(outcome.kind, TrainOutcome::Kind::kFailed);
  EXPECT_NE(outcome.message.find("RuntimeError: the model gave up at call 12"), std::string::npos)
      << outcome.message;
  EXPECT_NE(outcome.message.find("at step 12"), std::string::npos) << outcome.message;
  EXPECT_TRUE(outcome.retryable);
  EXPECT_NE(Logs().find("in forward"), std::string::npos) << Logs();
}

TEST_F(TrainerProcessTest, CancelStopsItAndOneThatHangsIsKilledAfterTheGrace) {
  WriteFile("model.py", kModel);
  TrainOutcome outcome =
      Train(Assign(SyntheticJob("{}", 1000000)), std::chrono::milliseconds(1500));
  ASSERT_EQ(outcome.kind, TrainOutcome::Kind::kCancelled) << outcome.message;
  EXPECT_EQ(outcome.message.find("killed"), std::string::npos) << outcome.message;

  observer_ = RecordingObserver();
  outcome = Train(Assign(SyntheticJob("{hang_at: 3}", 1000)), std::chrono::milliseconds(1500));
  ASSERT_EQ(outcome.kind, TrainOutcome::Kind::kCancelled) << outcome.message;
  EXPECT_NE(outcome.message.find("did not stop within 2 s and was killed"), std::string::npos)
      << outcome.message;
  EXPECT_LT(seconds_, 15.0);
}

// What the worker holds (a token in its environment, its link's socket) never reaches the
// user's code.
TEST_F(TrainerProcessTest, TrainingProcessGetsNoCredentialsOrOpenSockets) {
  WriteFile("model.py", R"PY(
import os
import torch
from torch import nn

def build_model():
    leaked = [k for k, v in os.environ.items() if "not-for-user-code" in v]
    if leaked:
        raise RuntimeError("inherited " + ", ".join(leaked))
    for fd in os.listdir("/proc/self/fd"):
        target = os.readlink("/proc/self/fd/" + fd) if os.path.exists("/proc/self/fd/" + fd) else ""
        if target.startswith("socket:"):
            raise RuntimeError("inherited descriptor %s: %s" % (fd, target))
    return nn.Linear(16, 4)
)PY");
  setenv("STOKE_TOKEN", "not-for-user-code", 1);
  setenv("STOKE_JOIN_TOKEN", "not-for-user-code", 1);
  const int socket_fd = socket(AF_INET, SOCK_STREAM, 0);  // not close-on-exec
  ASSERT_GE(socket_fd, 0);
  const TrainOutcome outcome = Train(Assign(SyntheticJob("{}", 5)));
  close(socket_fd);
  unsetenv("STOKE_TOKEN");
  unsetenv("STOKE_JOIN_TOKEN");
  EXPECT_EQ(outcome.kind, TrainOutcome::Kind::kSucceeded) << outcome.message << "\n" << Logs();
}

// The older way in: a scripted module trains in the training process too, and each
// checkpoint carries it back with its trained weights, forward and all.
TEST_F(TrainerProcessTest, TorchScriptModelTrainsAndExportsItselfWithItsTrainedWeights) {
  const std::string scripted = dir_.File("net.pt");
  const CommandResult script = RunCommand(
      {"/usr/bin/python3", "-c",
       "import torch; from torch import nn; torch.jit.script(nn.Sequential(nn.Linear(16, 32), "
       "nn.ReLU(), nn.Linear(32, 4))).save('" +
           scripted + "')"});
  ASSERT_EQ(script.exit_code, 0) << script.err;
  const auto assignment =
      Assign("model:\n  torchscript: {path: " + scripted +
             "}\ndata:\n  synthetic: {features: 16, num_classes: 4}\ntraining:\n  steps: 30\n"
             "  batch_size: 32\n");
  const TrainOutcome outcome = Train(assignment);
  ASSERT_EQ(outcome.kind, TrainOutcome::Kind::kSucceeded) << outcome.message << "\n" << Logs();
  const std::string checkpoint = assignment.job_dir() + "/checkpoints/step-30";
  const CommandResult checked = RunCommand(
      {"/usr/bin/python3", std::string(STOKE_SOURCE_DIR) + "/tests/support/check_exports.py",
       "torchscript", checkpoint + "/model.torchscript.pt", checkpoint + "/model.pt"});
  EXPECT_EQ(checked.exit_code, 0) << checked.out << checked.err;
}

// Trainers started ahead of their tasks (as GPU workers do): a task finds its trainer
// ready and waits for no start; one that died while it waited is replaced.
TEST_F(TrainerProcessTest, TrainersStartedAheadServeOneTaskEachAndADeadOneIsReplaced) {
  WriteFile("model.py", kModel);
  worker::TrainerProcessOptions options;
  options.trainer_path = STOKE_TRAINER_BINARY;
  options.device = "cpu:0";
  options.threads = 1;
  worker::SpareTrainer trainers(options, /*ahead=*/true);
  worker::TaskStops stops;
  for (int task = 0; task < 2; ++task) {
    // Time enough for the spare to have started and imported torch.
    std::this_thread::sleep_for(std::chrono::seconds(3));
    observer_ = RecordingObserver();
    const TrainOutcome outcome = trainers.Train(Assign(SyntheticJob("{}", 10)), observer_, stops);
    ASSERT_EQ(outcome.kind, TrainOutcome::Kind::kSucceeded) << outcome.message << "\n" << Logs();
    ASSERT_EQ(observer_.first_steps.size(), 1u);
    EXPECT_EQ(observer_.first_steps[0].process_seconds, 0.0) << "task " << task;
  }
  // The spare waiting now dies (its device failed, say): the next task gets a new one.
  std::this_thread::sleep_for(std::chrono::seconds(1));
  EXPECT_EQ(KillChildren("stoke-trainer"), 1);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // until it is gone
  observer_ = RecordingObserver();
  const TrainOutcome outcome = trainers.Train(Assign(SyntheticJob("{}", 10)), observer_, stops);
  EXPECT_EQ(outcome.kind, TrainOutcome::Kind::kSucceeded) << outcome.message << "\n" << Logs();
}

TEST_F(TrainerProcessTest, MissingCodeFailsWithoutStartingAnything) {
  WriteFile("model.py", kModel);
  auto assignment = Assign(SyntheticJob("{}", 5));
  assignment.clear_code();
  const TrainOutcome outcome = Train(assignment);
  ASSERT_EQ(outcome.kind, TrainOutcome::Kind::kFailed);
  EXPECT_NE(outcome.message.find("without the model's code"), std::string::npos) << outcome.message;
  EXPECT_FALSE(outcome.retryable);
}

}  // namespace
}  // namespace stoke::testing
