// A user's own nn.Module through the `stoke` CLI, as a team would bring one: the code
// travels with the job, trains on a local CPU worker, and a crash in it fails that job
// while the worker serves the next. Real coordinator, worker and training processes.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <thread>

#include "tests/support/coordinator_process.h"
#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"
#include "tests/support/wait.h"

namespace stoke::testing {
namespace {

constexpr const char* kModel = R"PY(
import os, signal
import torch
from torch import nn

class Net(nn.Module):
    def __init__(self, width=32, crash_at=0):
        super().__init__()
        self.a, self.b = nn.Linear(16, width), nn.Linear(width, 4)
        self.calls, self.crash_at = 0, crash_at

    def forward(self, x):
        if self.training:
            self.calls += 1
            if self.calls == self.crash_at:
                os.kill(os.getpid(), signal.SIGSEGV)
        return self.b(torch.relu(self.a(x)))

def build_model(**args):
    return Net(**args)
)PY";

class PythonModelsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { dir_ = new TempDir(); }
  static void TearDownTestSuite() {
    delete coordinator_;
    delete dir_;
  }
  void SetUp() override {
    if (!coordinator_) {
      CoordinatorProcess::Options options{dir_->path()};
      options.local_workers = "cpu:1";
      coordinator_ = CoordinatorProcess::Start(options).release();
    }
    ASSERT_NE(coordinator_, nullptr);
    std::ofstream(files_.File("model.py")) << kModel;
  }

  // A job file beside model.py, naming it relatively, as a user writes one.
  std::string JobFile(const std::string& args, int steps, const std::string& extra = "") {
    std::string path = files_.File("job.yaml");
    std::ofstream(path) << "name: own-model\nmodel:\n  python:\n    file: model.py\n    args: "
                        << args << "\ndata:\n  synthetic: {features: 16, num_classes: 4}\n"
                        << "training:\n  steps: " << steps
                        << "\n  batch_size: 32\nmetrics:\n  interval_steps: 10\n"
                        << extra;
    return path;
  }

  CommandResult Stoke(std::vector<std::string> args, const std::string& address = "") {
    args.insert(args.begin(), {STOKE_CLI_BINARY, "--address",
                               address.empty() ? coordinator_->address() : address});
    return RunCommand(args);
  }

  static std::string IdOf(const CommandResult& submit) {
    return submit.out.substr(0, submit.out.find('\n'));
  }

  static TempDir* dir_;
  static CoordinatorProcess* coordinator_;
  TempDir files_;
};

TempDir* PythonModelsTest::dir_ = nullptr;
CoordinatorProcess* PythonModelsTest::coordinator_ = nullptr;

TEST_F(PythonModelsTest, SubmittedWithItsCodeItTrainsAndTheJobNamesTheCode) {
  const CommandResult submit = Stoke({"submit", JobFile("{width: 48}", 60), "--watch"});
  ASSERT_EQ(submit.exit_code, 0) << submit.out << submit.err << coordinator_->Log();
  auto job = coordinator_->client().GetJob(IdOf(submit));
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->state(), v1::JOB_STATE_SUCCEEDED) << job->message();
  const auto& python = job->spec().model().python();
  EXPECT_EQ(python.module(), "model");
  EXPECT_EQ(python.factory(), "build_model");
  EXPECT_EQ(python.code_sha256().size(), 64u);
  EXPECT_EQ(python.code_bytes(), std::string(kModel).size());
  EXPECT_EQ(python.args().fields().at("width").number_value(), 48);
  EXPECT_GT(job->latest_eval().eval().accuracy(), 0.4);
  const CommandResult status = Stoke({"status", job->id()});
  EXPECT_NE(status.out.find("model.build_model, code sha256 " + python.code_sha256()),
            std::string::npos)
      << status.out;

  // Exports that PyTorch alone loads: the state_dict (the default) and safetensors.
  const std::string state_dict = files_.File("model-state.pt");
  const std::string safetensors = files_.File("model.safetensors");
  const CommandResult exported = Stoke({"export", job->id(), state_dict});
  ASSERT_EQ(exported.exit_code, 0) << exported.err;
  const CommandResult as_safetensors =
      Stoke({"export", job->id(), safetensors, "--format", "safetensors"});
  ASSERT_EQ(as_safetensors.exit_code, 0) << as_safetensors.err;
  const CommandResult checked = RunCommand(
      {"/usr/bin/python3", std::string(STOKE_SOURCE_DIR) + "/tests/support/check_exports.py",
       "state_dict", files_.File("model.py"), "{\"width\": 48}", state_dict, safetensors});
  EXPECT_EQ(checked.exit_code, 0) << checked.out << checked.err;
  // Whoever can write the job's folder (a worker host) cannot make an export read files
  // elsewhere, a device, or a FIFO that would block the coordinator.
  auto checkpoints = coordinator_->client().ListCheckpoints(job->id());
  ASSERT_TRUE(checkpoints.ok() && checkpoints->checkpoints_size() > 0);
  const std::string planted = checkpoints->checkpoints(0).path() + "/state_dict.pt";
  for (const char* target : {"/etc/passwd", "/dev/zero"}) {
    ASSERT_EQ(std::remove(planted.c_str()), 0);
    ASSERT_EQ(symlink(target, planted.c_str()), 0);
    const CommandResult refused = Stoke({"export", job->id(), files_.File("leak")});
    EXPECT_NE(refused.exit_code, 0) << target;
    EXPECT_NE(refused.err.find("state_dict.pt"), std::string::npos) << refused.err;
  }
  // A hard link the job's code made to a file it could not read is not sent either.
  ASSERT_EQ(std::remove(planted.c_str()), 0);
  std::ofstream(files_.File("secret")) << "not the job's";
  ASSERT_EQ(link(files_.File("secret").c_str(), planted.c_str()), 0);
  const CommandResult linked = Stoke({"export", job->id(), files_.File("leak")});
  EXPECT_NE(linked.exit_code, 0);
  EXPECT_NE(linked.err.find("hard link"), std::string::npos) << linked.err;
  ASSERT_EQ(std::remove(planted.c_str()), 0);
  ASSERT_EQ(mkfifo(planted.c_str(), 0644), 0);
  const auto began = std::chrono::steady_clock::now();
  EXPECT_NE(Stoke({"export", job->id(), files_.File("leak")}).exit_code, 0);
  EXPECT_EQ(Stoke({"cluster"}).exit_code, 0);
  EXPECT_LT(std::chrono::steady_clock::now() - began, std::chrono::seconds(5));
  // A link planted where the client writes is replaced, not written through.
  const std::string target = files_.File("precious");
  std::ofstream(target) << "keep";
  ASSERT_EQ(symlink(target.c_str(), (files_.File("out.pt") + ".partial").c_str()), 0);
  ASSERT_EQ(
      Stoke({"export", job->id(), files_.File("out.pt"), "--format", "safetensors"}).exit_code, 0);
  std::ifstream precious(target);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(precious), {}), "keep");

  const CommandResult wrong = Stoke({"export", job->id(), state_dict, "--format", "torchscript"});
  EXPECT_NE(wrong.exit_code, 0);
  EXPECT_NE(wrong.err.find("exports as state_dict, safetensors or libtorch"), std::string::npos)
      << wrong.err;
}

TEST_F(PythonModelsTest, CrashFailsTheJobNamingTheSignalAndTheWorkerServesTheNext) {
  const CommandResult crash =
      Stoke({"submit", JobFile("{crash_at: 4}", 40, "max_restarts: 0\n"), "--watch"});
  EXPECT_EQ(crash.exit_code, 1) << crash.out << crash.err;
  auto failed = coordinator_->client().GetJob(IdOf(crash));
  ASSERT_TRUE(failed.ok()) << failed.status();
  EXPECT_EQ(failed->state(), v1::JOB_STATE_FAILED);
  EXPECT_NE(failed->message().find("the training process died: signal 11 (Segmentation fault) "
                                   "at step 4"),
            std::string::npos)
      << failed->message();

  // The same (only) worker takes the next job at once: it never went down.
  const CommandResult next = Stoke({"submit", JobFile("{}", 20)});
  ASSERT_EQ(next.exit_code, 0) << next.err;
  const std::string id = IdOf(next);
  ASSERT_TRUE(WaitFor(
      [&] {
        auto job = coordinator_->client().GetJob(id);
        return job.ok() && job->state() == v1::JOB_STATE_SUCCEEDED;
      },
      std::chrono::seconds(60)))
      << coordinator_->Log();
  auto succeeded = coordinator_->client().GetJob(id);
  const double idle_seconds =
      static_cast<double>(succeeded->start_time().seconds() - failed->end_time().seconds());
  EXPECT_LE(idle_seconds, 5.0);
}

TEST_F(PythonModelsTest, CodeOverTheLimitIsRefusedBeforeAnythingIsSent) {
  std::ofstream(files_.File("model.py")) << kModel << "\n# " << std::string(9 << 20, 'x') << "\n";
  const CommandResult submit = Stoke({"submit", JobFile("{}", 10)});
  EXPECT_EQ(submit.exit_code, 2) << submit.out;
  EXPECT_NE(submit.err.find("model.python.file"), std::string::npos) << submit.err;
  EXPECT_NE(submit.err.find("data root"), std::string::npos) << submit.err;
}

TEST_F(PythonModelsTest, CoordinatorWithPythonModelsOffRefusesThem) {
  TempDir data;
  CoordinatorProcess::Options options{data.path()};
  options.local_workers = "0";
  options.extra_args.push_back("--python-models");
  options.extra_args.push_back("off");
  auto closed = CoordinatorProcess::Start(options);
  ASSERT_NE(closed, nullptr);
  const CommandResult submit = Stoke({"submit", JobFile("{}", 10)}, closed->address());
  EXPECT_EQ(submit.exit_code, 7) << submit.out << submit.err;
  EXPECT_NE(submit.err.find("--python-models off"), std::string::npos) << submit.err;
  // A TorchScript module is code as well: refused alike, whatever file it names.
  const std::string scripted = files_.File("scripted.yaml");
  std::ofstream(scripted) << "model:\n  torchscript: {path: /usr/share/datasets/model.pt}\n"
                          << "data:\n  synthetic: {features: 16, num_classes: 4}\n";
  const CommandResult torchscript = Stoke({"submit", scripted}, closed->address());
  EXPECT_EQ(torchscript.exit_code, 7) << torchscript.out << torchscript.err;
  EXPECT_NE(torchscript.err.find("model.torchscript: this coordinator runs no submitted code"),
            std::string::npos)
      << torchscript.err;
}

}  // namespace
}  // namespace stoke::testing
