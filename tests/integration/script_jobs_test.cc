// Script jobs as a team would run them: a plain DDP script written for torchrun
// (examples/scripts/) submitted with `stoke submit`, on two CPU ranks (gloo) of a real
// coordinator's local workers. Its logs and what it reports reach `stoke watch`, `stoke
// logs` and /metrics; a cancel stops it within its grace; a rank killed mid-run fails the
// attempt, and the next attempt resumes from STOKE_CHECKPOINT_DIR.
#include <dirent.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <thread>

#include "tests/support/coordinator_process.h"
#include "tests/support/http_get.h"
#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"
#include "tests/support/wait.h"

namespace stoke::testing {
namespace {

const std::string kScripts = std::string(STOKE_SOURCE_DIR) + "/examples/scripts";

// The pid of the process of `job`'s rank `rank` (found by its environment), or -1.
pid_t RankProcess(const std::string& job, int rank) {
  DIR* proc = opendir("/proc");
  pid_t found = -1;
  while (dirent* entry = readdir(proc)) {
    const pid_t pid = static_cast<pid_t>(std::atoi(entry->d_name));
    if (pid <= 0) continue;
    std::ifstream in("/proc/" + std::string(entry->d_name) + "/environ");
    const std::string environ((std::istreambuf_iterator<char>(in)), {});
    const auto has = [&](const std::string& variable) {
      return environ.find(std::string(1, '\0') + variable + '\0') != std::string::npos ||
             environ.rfind(variable + '\0', 0) == 0;
    };
    if (has("STOKE_JOB_ID=" + job) && has("RANK=" + std::to_string(rank))) {
      found = pid;
      break;
    }
  }
  closedir(proc);
  return found;
}

class ScriptJobsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { dir_ = new TempDir(); }
  static void TearDownTestSuite() {
    delete coordinator_;
    delete dir_;
  }
  void SetUp() override {
    if (!coordinator_) {
      CoordinatorProcess::Options options{dir_->path()};
      options.local_workers = "cpu:2";
      coordinator_ = CoordinatorProcess::Start(options).release();
    }
    ASSERT_NE(coordinator_, nullptr);
  }

  // A job file running one of the example scripts, its folder sent with the job.
  std::string JobFile(const std::string& argv, const std::string& extra = "") {
    std::string path = files_.File("job.yaml");
    std::ofstream(path) << "name: script\ncommand:\n  argv: " << argv << "\n  workdir: " << kScripts
                        << "\n"
                        << extra << "resources: {gpus: 2}\n";
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

  v1::Job Job(const std::string& id) {
    auto job = coordinator_->client().GetJob(id);
    EXPECT_TRUE(job.ok()) << job.status();
    return job.ok() ? *job : v1::Job();
  }

  bool WaitForState(const std::string& id, v1::JobState state, std::chrono::seconds limit) {
    return WaitFor([&] { return Job(id).state() == state; }, limit);
  }

  std::string JobDir(const std::string& id) { return dir_->path() + "/jobs/" + id; }

  static TempDir* dir_;
  static CoordinatorProcess* coordinator_;
  TempDir files_;
};

TempDir* ScriptJobsTest::dir_ = nullptr;
CoordinatorProcess* ScriptJobsTest::coordinator_ = nullptr;

TEST_F(ScriptJobsTest, TorchrunScriptTrainsOnTwoRanksWithItsLogsAndReportedMetrics) {
  const CommandResult submit =
      Stoke({"submit",
             JobFile("[python, ddp_train_reporting.py, --steps, '300', --step-delay, '0.02']")});
  ASSERT_EQ(submit.exit_code, 0) << submit.out << submit.err;
  const std::string id = IdOf(submit);

  // While it trains: its loss and its own scalar on /metrics.
  std::string metrics_address;
  std::ifstream(dir_->File("metrics.address")) >> metrics_address;
  ASSERT_FALSE(metrics_address.empty());
  std::string text;
  EXPECT_TRUE(WaitFor(
      [&] {
        text = HttpGet(metrics_address, "/metrics");
        return SampleValue(text, "stoke_job_loss{job_id=\"" + id + "\"}") > 0 &&
               SampleValue(text,
                           "stoke_job_reported{job_id=\"" + id + "\",name=\"train_accuracy\"}") > 0;
      },
      std::chrono::seconds(60)))
      << text << coordinator_->Log();

  // `stoke watch` follows it to its end: progress from its reports, its output.
  const CommandResult watch = Stoke({"watch", id});
  EXPECT_EQ(watch.exit_code, 0) << watch.out << watch.err;
  const std::string shown = watch.out + watch.err;
  EXPECT_NE(shown.find("step 300/300"), std::string::npos) << shown;
  EXPECT_NE(shown.find("loss"), std::string::npos) << shown;
  EXPECT_NE(shown.find("SUCCEEDED"), std::string::npos) << shown;

  const v1::Job job = Job(id);
  EXPECT_EQ(job.state(), v1::JOB_STATE_SUCCEEDED) << job.message();
  EXPECT_EQ(job.spec().command().code_sha256().size(), 64u);
  EXPECT_EQ(job.latest_metrics().step(), 300u);
  EXPECT_GT(job.latest_metrics().scalars().at("accuracy"), 0.5);  // reported at the end
  EXPECT_GT(job.latest_metrics().samples_per_second(), 0);

  const CommandResult logs = Stoke({"logs", id});
  EXPECT_NE(logs.out.find("rank 1 of 2: "), std::string::npos) << logs.out;
  EXPECT_NE(logs.out.find("ddp_train_reporting.py --steps 300"), std::string::npos) << logs.out;
  EXPECT_NE(logs.out.find("done: 300 steps, accuracy"), std::string::npos) << logs.out;
}

TEST_F(ScriptJobsTest, EachRankGetsTorchrunsEnvironmentAndNoneOfTheWorkersDescriptors) {
  const std::string path = files_.File("env.yaml");
  std::ofstream(path)
      << "name: env\ncommand:\n  argv: [/bin/sh, -c, 'env | sort; ls /proc/self/fd']\n"
      << "  env: [GREETING=hello]\nresources: {gpus: 2}\n";
  const CommandResult submit = Stoke({"submit", path, "--watch"});
  ASSERT_EQ(submit.exit_code, 0) << submit.out << submit.err;
  const std::string id = IdOf(submit);
  const std::string logs = Stoke({"logs", id}).out;
  const std::string job_dir = JobDir(id);
  for (const std::string& line : std::vector<std::string>{
           "[rank 0] RANK=0", "[rank 1] RANK=1", "[rank 1] WORLD_SIZE=2", "[rank 1] LOCAL_RANK=0",
           "[rank 1] LOCAL_WORLD_SIZE=1", "[rank 1] MASTER_ADDR=127.0.0.1",
           "[rank 0] MASTER_PORT=", "[rank 1] CUDA_VISIBLE_DEVICES=", "[rank 1] STOKE_JOB_ID=" + id,
           "[rank 1] STOKE_CHECKPOINT_DIR=" + job_dir + "/checkpoints", "[rank 1] GREETING=hello",
           "[rank 0] PWD=" + job_dir + "/attempts/1/rank-0"}) {
    EXPECT_NE(logs.find(line), std::string::npos) << line << "\n" << logs;
  }
  // Rank 0's and rank 1's MASTER_PORT are the same port.
  const size_t port0 = logs.find("[rank 0] MASTER_PORT=");
  const size_t port1 = logs.find("[rank 1] MASTER_PORT=");
  ASSERT_NE(port1, std::string::npos);
  EXPECT_EQ(logs.substr(port0 + 21, 5), logs.substr(port1 + 21, 5));
  // Nothing of the worker's: no coordinator address or token, no descriptor past the
  // report socket (0 to 3, and the one ls opened to list them).
  EXPECT_EQ(logs.find("STOKE_ADDRESS"), std::string::npos) << logs;
  EXPECT_EQ(logs.find("TOKEN"), std::string::npos) << logs;
  EXPECT_EQ(logs.find("[rank 0] 5\n"), std::string::npos) << logs;
  EXPECT_NE(logs.find("[rank 0] 3\n"), std::string::npos) << logs;
}

TEST_F(ScriptJobsTest, CancelStopsItWithinTheGraceAndTheScriptCheckpointsFirst) {
  // The reporting script saves and leaves when stoke.should_stop() turns true, long before
  // its grace of 20 s is up.
  const CommandResult polite =
      Stoke({"submit", JobFile("[python, ddp_train_reporting.py, --steps, '100000', --step-delay, "
                               "'0.01']",
                               "  grace_seconds: 20\n")});
  ASSERT_EQ(polite.exit_code, 0) << polite.err;
  const std::string id = IdOf(polite);
  ASSERT_TRUE(
      WaitFor([&] { return Job(id).latest_metrics().step() >= 20; }, std::chrono::seconds(60)))
      << coordinator_->Log();
  const auto gone = [](const std::string& job) {
    return RankProcess(job, 0) == -1 && RankProcess(job, 1) == -1;
  };
  auto began = std::chrono::steady_clock::now();
  ASSERT_EQ(Stoke({"cancel", id}).exit_code, 0);
  EXPECT_EQ(Job(id).state(), v1::JOB_STATE_CANCELLED);
  ASSERT_TRUE(WaitFor([&] { return gone(id); }, std::chrono::seconds(30)));
  EXPECT_LT(std::chrono::steady_clock::now() - began, std::chrono::seconds(10));
  // It saved where its next run would resume from.
  bool saved = false;
  DIR* folder = opendir((JobDir(id) + "/checkpoints").c_str());
  ASSERT_NE(folder, nullptr);
  while (dirent* entry = readdir(folder)) {
    saved |= std::string(entry->d_name).rfind("step-", 0) == 0;
  }
  closedir(folder);
  EXPECT_TRUE(saved);

  // The plain script knows nothing of Stoke: SIGTERM halfway through its grace ends it.
  const CommandResult plain =
      Stoke({"submit", JobFile("[python, ddp_train.py, --steps, '100000', --step-delay, '0.01']",
                               "  grace_seconds: 6\n")});
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  const std::string plain_id = IdOf(plain);
  ASSERT_TRUE(WaitFor([&] { return RankProcess(plain_id, 1) > 0; }, std::chrono::seconds(60)));
  ASSERT_TRUE(WaitForState(plain_id, v1::JOB_STATE_RUNNING, std::chrono::seconds(30)));
  began = std::chrono::steady_clock::now();
  ASSERT_EQ(Stoke({"cancel", plain_id}).exit_code, 0);
  ASSERT_TRUE(WaitFor([&] { return gone(plain_id); }, std::chrono::seconds(30)));
  const auto took = std::chrono::steady_clock::now() - began;
  EXPECT_GE(took, std::chrono::seconds(2));  // it was given the first half of its grace
  EXPECT_LT(took, std::chrono::seconds(6));
}

TEST_F(ScriptJobsTest, AKilledRankFailsTheAttemptAndTheRestartResumesFromItsCheckpoint) {
  const CommandResult submit =
      Stoke({"submit", JobFile("[python, ddp_train.py, --steps, '400', --step-delay, '0.02', "
                               "--checkpoint-every, '50']",
                               "max_restarts: 2\n")});
  ASSERT_EQ(submit.exit_code, 0) << submit.err;
  const std::string id = IdOf(submit);
  const std::string checkpoint = JobDir(id) + "/checkpoints/step-100.pt";
  ASSERT_TRUE(
      WaitFor([&] { return access(checkpoint.c_str(), F_OK) == 0; }, std::chrono::seconds(90)))
      << coordinator_->Log();
  const pid_t rank1 = RankProcess(id, 1);
  ASSERT_GT(rank1, 0);
  ASSERT_EQ(kill(rank1, SIGKILL), 0);

  ASSERT_TRUE(WaitForState(id, v1::JOB_STATE_SUCCEEDED, std::chrono::seconds(120)))
      << Job(id).message() << coordinator_->Log();
  const v1::Job job = Job(id);
  EXPECT_EQ(job.attempt(), 2u);
  const CommandResult logs = Stoke({"logs", id});
  EXPECT_NE(logs.out.find("signal 9"), std::string::npos) << logs.out;
  EXPECT_NE(logs.out.find("resumed from " + JobDir(id) + "/checkpoints/step-"), std::string::npos)
      << logs.out;
  EXPECT_NE(logs.out.find("done: 400 steps"), std::string::npos) << logs.out;
}

// Preempted, a script is told to stop as for a cancel (stoke.should_stop(), then SIGTERM
// within its grace); the job waits as PREEMPTED, not cancelled, and its next attempt
// resumes from the checkpoint the script saved as it stopped.
TEST_F(ScriptJobsTest, APreemptedScriptSavesStopsAndResumesWhenPlacedAgain) {
  std::string path = files_.File("low.yaml");
  std::ofstream(path) << "name: low\ncommand:\n  argv: [python, ddp_train_reporting.py, --steps, "
                         "'1500', --step-delay, '0.01']\n  workdir: "
                      << kScripts << "\n  grace_seconds: 20\nresources: {gpus: 2, priority: -1}\n";
  const CommandResult submit = Stoke({"submit", path});
  ASSERT_EQ(submit.exit_code, 0) << submit.err;
  const std::string id = IdOf(submit);
  ASSERT_TRUE(
      WaitFor([&] { return Job(id).latest_metrics().step() >= 20; }, std::chrono::seconds(60)))
      << coordinator_->Log();
  const std::string urgent_path = files_.File("urgent.yaml");
  std::ofstream(urgent_path) << "name: urgent\nresources: {priority: 5}\nmodel: {mlp: {hidden: "
                                "[16]}}\ndata: {synthetic: {features: 8}}\ntraining: {steps: 20}\n";
  const CommandResult urgent = Stoke({"submit", urgent_path});
  ASSERT_EQ(urgent.exit_code, 0) << urgent.err;
  ASSERT_TRUE(WaitForState(id, v1::JOB_STATE_SUCCEEDED, std::chrono::seconds(180)))
      << Job(id).message() << coordinator_->Log();
  const v1::Job job = Job(id);
  EXPECT_EQ(job.preemptions(), 1u);
  EXPECT_EQ(job.restarts(), 0u);
  EXPECT_EQ(job.attempt(), 2u);
  const CommandResult logs = Stoke({"logs", id});
  EXPECT_NE(logs.out.find("PREEMPTED"), std::string::npos) << logs.out;
  EXPECT_NE(logs.out.find("resumed from " + JobDir(id) + "/checkpoints/step-"), std::string::npos)
      << logs.out;
}

TEST_F(ScriptJobsTest, BadCommandsAreRefusedNamingTheField) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"name: x\ncommand: {argv: []}\n", "command.argv"},
      {"name: x\ncommand: {argv: [python, t.py], env: [RANK=3]}\n", "command.env[0]"},
      {"name: x\ncommand: {argv: [python, t.py], env: [novalue]}\n", "command.env[0]"},
      {"name: x\ncommand: {argv: [python, t.py], python: venv}\n", "command.python"},
      {"name: x\ncommand: {argv: [python, t.py]}\ntraining: {steps: 10}\n", "training"},
      {"name: x\ncommand: {argv: [python, t.py], workdir: /nonexistent/folder}\n",
       "command.workdir"},
  };
  for (const auto& [text, field] : cases) {
    const std::string path = files_.File("bad.yaml");
    std::ofstream(path) << text;
    const CommandResult refused = Stoke({"submit", path});
    EXPECT_NE(refused.exit_code, 0) << text;
    EXPECT_NE(refused.err.find(field), std::string::npos) << text << refused.err;
  }
  // A program that is not there fails the job at once, saying so, without retries.
  const CommandResult missing = Stoke({"submit", JobFile("[no-such-program-here]"), "--watch"});
  EXPECT_NE(missing.exit_code, 0);
  const v1::Job job = Job(IdOf(missing));
  EXPECT_EQ(job.state(), v1::JOB_STATE_FAILED);
  EXPECT_NE(job.message().find("no-such-program-here: not found"), std::string::npos)
      << job.message();
  EXPECT_EQ(job.attempt(), 1u);
}

TEST_F(ScriptJobsTest, ACoordinatorWithPythonModelsOffRunsNoScripts) {
  TempDir data;
  CoordinatorProcess::Options options{data.path()};
  options.local_workers = "0";
  options.extra_args.push_back("--python-models");
  options.extra_args.push_back("off");
  auto closed = CoordinatorProcess::Start(options);
  ASSERT_NE(closed, nullptr);
  const CommandResult submit =
      Stoke({"submit", JobFile("[python, ddp_train.py]")}, closed->address());
  EXPECT_EQ(submit.exit_code, 7) << submit.out << submit.err;
  EXPECT_NE(submit.err.find("command"), std::string::npos) << submit.err;
  EXPECT_NE(submit.err.find("--python-models off"), std::string::npos) << submit.err;
}

}  // namespace
}  // namespace stoke::testing
