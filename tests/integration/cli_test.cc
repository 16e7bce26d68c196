// The `stoke` CLI as a user runs it, against a real coordinator: what it prints, what it
// refuses, and the exit codes scripts depend on.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <unistd.h>

#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tests/support/coordinator_process.h"
#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"
#include "tests/support/wait.h"

namespace stoke::testing {
namespace {

class CliTest : public ::testing::Test {
 protected:
  // One coordinator for the suite, started by the first test: a failure to start then
  // fails that test (from SetUpTestSuite, gtest would only skip the tests).
  static void SetUpTestSuite() { dir_ = new TempDir(); }
  static void TearDownTestSuite() {
    delete coordinator_;
    delete dir_;
  }
  void SetUp() override {
    if (!coordinator_) coordinator_ = CoordinatorProcess::Start({dir_->path()}).release();
    ASSERT_NE(coordinator_, nullptr);
  }

  CommandResult Stoke(std::vector<std::string> args) {
    args.insert(args.begin(), {STOKE_CLI_BINARY, "--address", coordinator_->address()});
    return RunCommand(args);
  }

  std::string WriteFile(const std::string& name, const std::string& text) {
    std::string path = files_.File(name);
    std::ofstream(path) << text;
    return path;
  }

  std::string TinyJobFile(int steps) {
    return WriteFile("job.yaml",
                     "name: cli-test\nmodel:\n  mlp:\n    hidden: [16]\n"
                     "data:\n  synthetic: {features: 8, num_classes: 3}\n"
                     "training:\n  steps: " +
                         std::to_string(steps) +
                         "\n  batch_size: 16\nmetrics:\n  interval_steps: 10\n");
  }

  static TempDir* dir_;
  static CoordinatorProcess* coordinator_;
  TempDir files_;
};

TempDir* CliTest::dir_ = nullptr;
CoordinatorProcess* CliTest::coordinator_ = nullptr;

TEST_F(CliTest, SubmitPrintsTheIdAndWatchFollowsToSuccess) {
  CommandResult submit = Stoke({"submit", TinyJobFile(40)});
  ASSERT_EQ(submit.exit_code, 0) << submit.err;
  std::string id = submit.out.substr(0, submit.out.find('\n'));
  ASSERT_FALSE(id.empty());
  EXPECT_NE(submit.err.find("submitted job " + id), std::string::npos) << submit.err;

  // Piped, watch prints plain lines: states, one line per metrics sample, the verdict.
  CommandResult watch = Stoke({"watch", id});
  EXPECT_EQ(watch.exit_code, 0) << watch.out << watch.err;
  EXPECT_NE(watch.out.find("job " + id + " step 10/40 (25%)  loss "), std::string::npos)
      << watch.out;
  EXPECT_NE(watch.out.find("samples/s  ETA "), std::string::npos) << watch.out;
  EXPECT_NE(watch.out.find("job " + id + " SUCCEEDED"), std::string::npos) << watch.out;
  EXPECT_EQ(watch.out.find('\r'), std::string::npos) << "no terminal control codes in a pipe";
  // Each evaluation once: the worker's own log line of it is not printed again.
  const std::string eval = "eval at step 40:";
  const size_t first = watch.out.find(eval);
  EXPECT_NE(first, std::string::npos) << watch.out;
  EXPECT_EQ(watch.out.find(eval, first + 1), std::string::npos) << watch.out;

  // On a terminal (script(1) gives it one), the "submitted job" line alone, no bare id.
  const CommandResult terminal =
      RunCommand({"/usr/bin/script", "-qec",
                  std::string(STOKE_CLI_BINARY) + " --address " + coordinator_->address() +
                      " submit " + TinyJobFile(10),
                  "/dev/null"});
  EXPECT_EQ(terminal.exit_code, 0) << terminal.out << terminal.err;
  EXPECT_NE(terminal.out.find("submitted job"), std::string::npos) << terminal.out;
  EXPECT_EQ(terminal.out.find("\n" + std::to_string(std::stoi(id) + 1) + "\r"), std::string::npos)
      << terminal.out;
}

TEST_F(CliTest, SubmitWithJsonOutputPrintsTheJobObject) {
  CommandResult submit = Stoke({"--output", "json", "submit", TinyJobFile(10)});
  ASSERT_EQ(submit.exit_code, 0) << submit.err;
  EXPECT_NE(submit.out.find("\"id\": \""), std::string::npos) << submit.out;
  EXPECT_NE(submit.out.find("\"name\": \"cli-test\""), std::string::npos) << submit.out;
}

TEST_F(CliTest, SubmitWatchExitsNonZeroForAJobThatFails) {
  // Diverges within a few steps: SGD at the largest learning rate and weight decay the
  // coordinator accepts multiplies every weight by -99 a step; not retried.
  std::string file = WriteFile(
      "diverge.yaml",
      "model: {mlp: {hidden: [16]}}\ndata: {synthetic: {features: 8}}\n"
      "optimizer: {sgd: {}, lr: 10, weight_decay: 10}\ntraining: {steps: 100, batch_size: 16}\n"
      "metrics: {interval_steps: 5}\n");
  CommandResult result = Stoke({"submit", file, "--watch"});
  EXPECT_EQ(result.exit_code, 1) << result.out << result.err;
  EXPECT_NE(result.out.find("FAILED"), std::string::npos) << result.out;
  EXPECT_NE(result.out.find("loss became"), std::string::npos) << result.out;
}

TEST_F(CliTest, BadJobFilesAreRefusedNamingFileLineAndField) {
  std::string file =
      WriteFile("bad.yaml", "model:\n  mlp: {}\ntraining:\n  steps: 10\n  bach_size: 4\n");
  CommandResult result = Stoke({"submit", file});
  EXPECT_EQ(result.exit_code, 2);
  EXPECT_NE(
      result.err.find(file + ":5:3: training.bach_size: unknown field; did you mean batch_size?"),
      std::string::npos)
      << result.err;
  // Well-formed but invalid: the coordinator names the field.
  file = WriteFile("invalid.yaml", "model:\n  mlp: {}\ndata:\n  synthetic: {}\n");
  result = Stoke({"submit", file});
  EXPECT_EQ(result.exit_code, 2);
  EXPECT_NE(result.err.find(file + ": training: set steps or epochs"), std::string::npos)
      << result.err;
  result = Stoke({"submit", files_.File("missing.yaml")});
  EXPECT_EQ(result.exit_code, 2);
  EXPECT_NE(result.err.find("missing.yaml"), std::string::npos) << result.err;
}

// The file's problems and the coordinator's come in one answer, each where the file wrote
// its field, and nothing is stored; --dry-run checks a good file and stores nothing either.
TEST_F(CliTest, EveryProblemOfAJobFileIsPrintedAtOnceInPlace) {
  const std::string file = WriteFile("four.yaml",
                                     "name: four\n"
                                     "model:\n"
                                     "  mlp: {hidden: [8], dropout: 2}\n"
                                     "data: {synthetic: {features: 8}}\n"
                                     "optimizer: {lr: 50}\n"
                                     "training:\n"
                                     "  steps: 0\n"
                                     "  batch_size: 16\n");
  CommandResult result = Stoke({"submit", file});
  EXPECT_EQ(result.exit_code, 2) << result.err;
  EXPECT_NE(result.err.find(file + ":3:22: model.mlp.dropout: must be in [0, 1)"),
            std::string::npos)
      << result.err;
  EXPECT_NE(result.err.find(file + ":5:13: optimizer.lr: 50 is out of range"), std::string::npos)
      << result.err;
  EXPECT_NE(result.err.find(file + ":7:3: training.steps: must be at least 1"), std::string::npos)
      << result.err;
  EXPECT_NE(result.err.find(file + ": 3 problems; nothing was submitted"), std::string::npos)
      << result.err;
  CommandResult list = Stoke({"list", "-o", "json"});
  EXPECT_EQ(list.out.find("\"four\""), std::string::npos) << list.out;

  CommandResult dry = Stoke({"-o", "json", "submit", "--dry-run", TinyJobFile(10)});
  EXPECT_EQ(dry.exit_code, 0) << dry.err;
  // The job as it would be stored: defaults filled in.
  EXPECT_NE(dry.out.find("\"max_restarts\""), std::string::npos) << dry.out;
  list = Stoke({"list", "-o", "json"});
  EXPECT_EQ(list.out.find("cli-test"), std::string::npos) << list.out;
}

TEST_F(CliTest, ReadCommandsWorkAndSpeakJson) {
  CommandResult submit = Stoke({"submit", TinyJobFile(10)});
  ASSERT_EQ(submit.exit_code, 0);
  std::string id = submit.out.substr(0, submit.out.find('\n'));
  ASSERT_EQ(Stoke({"watch", id}).exit_code, 0);

  CommandResult list = Stoke({"list"});
  EXPECT_EQ(list.exit_code, 0);
  EXPECT_NE(list.out.find("ID"), std::string::npos);
  EXPECT_NE(list.out.find("SUCCEEDED"), std::string::npos) << list.out;
  CommandResult list_json = Stoke({"list", "--state", "succeeded", "-o", "json"});
  EXPECT_EQ(list_json.exit_code, 0);
  EXPECT_NE(list_json.out.find("\"state\": \"JOB_STATE_SUCCEEDED\""), std::string::npos);
  EXPECT_EQ(list_json.out.find("JOB_STATE_RUNNING"), std::string::npos);

  CommandResult status = Stoke({"status", id});
  EXPECT_EQ(status.exit_code, 0);
  EXPECT_NE(status.out.find("state      SUCCEEDED"), std::string::npos) << status.out;
  EXPECT_NE(status.out.find("step 10/10"), std::string::npos) << status.out;

  CommandResult cluster = Stoke({"cluster"});
  EXPECT_EQ(cluster.exit_code, 0);
  EXPECT_NE(cluster.out.find("2 workers"), std::string::npos) << cluster.out;
  CommandResult cluster_json = Stoke({"cluster", "--output", "json"});
  EXPECT_NE(cluster_json.out.find("\"workers\""), std::string::npos);

  CommandResult logs = Stoke({"logs", id});
  EXPECT_EQ(logs.exit_code, 0);
  EXPECT_NE(logs.out.find("[rank 0] training cli-test"), std::string::npos) << logs.out;
  EXPECT_NE(logs.out.find("-- SUCCEEDED"), std::string::npos) << logs.out;
}

// Submit to first training step on a warm CPU worker: measured by the worker, put
// together by the coordinator, kept in the store once the job has finished, and shown.
TEST_F(CliTest, StatusSaysHowLongTheJobTookToStart) {
  CommandResult submit = Stoke({"submit", TinyJobFile(20)});
  ASSERT_EQ(submit.exit_code, 0) << submit.err;
  std::string id = submit.out.substr(0, submit.out.find('\n'));
  ASSERT_EQ(Stoke({"watch", id}).exit_code, 0);

  CommandResult status = Stoke({"status", id});
  ASSERT_EQ(status.exit_code, 0) << status.err;
  // A tiny job on a warm worker starts within milliseconds: the text shows "0.00 s", the
  // API the exact figure (below).
  ASSERT_NE(status.out.find("  started in "), std::string::npos) << status.out;
  EXPECT_NE(status.out.find(" s (submitted → first training step)\n"), std::string::npos)
      << status.out;
  EXPECT_NE(status.out.find("    queued/scheduling "), std::string::npos) << status.out;
  EXPECT_NE(status.out.find(", first step "), std::string::npos) << status.out;

  // The API carries it too, with the parts.
  CommandResult json = Stoke({"status", id, "--output", "json"});
  ASSERT_EQ(json.exit_code, 0) << json.err;
  EXPECT_NE(json.out.find("\"startup\": {"), std::string::npos) << json.out;
  EXPECT_NE(json.out.find("\"first_step_time\": \""), std::string::npos) << json.out;
  EXPECT_NE(json.out.find("\"first_step_seconds\": "), std::string::npos) << json.out;
  const size_t at = json.out.find("\"seconds\": ", json.out.find("\"startup\": {"));
  ASSERT_NE(at, std::string::npos) << json.out;
  const double seconds = std::stod(json.out.substr(at + 11));
  EXPECT_GT(seconds, 0.0) << json.out;
  EXPECT_LT(seconds, 30.0) << json.out;

  CommandResult logs = Stoke({"logs", id});
  EXPECT_NE(logs.out.find("[rank 0] first training step done "), std::string::npos) << logs.out;
}

TEST_F(CliTest, TopShowsEveryDeviceAndTheRunningJob) {
  std::string file = WriteFile("top.yaml",
                               "name: topped\nmodel: {mlp: {hidden: [16]}}\n"
                               "data: {synthetic: {features: 8}}\n"
                               "training: {steps: 100000000, batch_size: 16}\n"
                               "metrics: {interval_steps: 20}\n");
  CommandResult submit = Stoke({"submit", file});
  ASSERT_EQ(submit.exit_code, 0);
  std::string id = submit.out.substr(0, submit.out.find('\n'));
  CommandResult top;
  // Device readings arrive with heartbeats, step time with the first samples.
  ASSERT_TRUE(WaitFor(
      [&] {
        top = Stoke({"top", "--once"});
        return top.exit_code == 0 && top.out.find(" RUNNING ") != std::string::npos &&
               top.out.find(" MHz") != std::string::npos;
      },
      std::chrono::seconds(30)))
      << top.out << top.err;
  // A device row per worker (cpu:0 and cpu:1), with utilization and memory; the job row.
  EXPECT_NE(top.out.find("cpu:0"), std::string::npos) << top.out;
  EXPECT_NE(top.out.find("cpu:1"), std::string::npos) << top.out;
  EXPECT_NE(top.out.find(id + "/0"), std::string::npos) << "the device holding the job" << top.out;
  EXPECT_NE(top.out.find("topped"), std::string::npos) << top.out;
  EXPECT_NE(top.out.find(" ms "), std::string::npos) << "step time" << top.out;
  ASSERT_EQ(Stoke({"cancel", id}).exit_code, 0);
}

TEST_F(CliTest, CancelAndItsExitCodes) {
  std::string file = WriteFile("long.yaml",
                               "model: {mlp: {hidden: [16]}}\ndata: {synthetic: {features: 8}}\n"
                               "training: {steps: 100000000, batch_size: 16}\n");
  CommandResult submit = Stoke({"submit", file});
  ASSERT_EQ(submit.exit_code, 0);
  std::string id = submit.out.substr(0, submit.out.find('\n'));
  CommandResult cancel = Stoke({"cancel", id, "--reason", "changed my mind"});
  EXPECT_EQ(cancel.exit_code, 0) << cancel.err;
  EXPECT_NE(cancel.out.find("CANCELLED"), std::string::npos);
  // Watching a cancelled job ends at once, and not with success.
  EXPECT_EQ(Stoke({"watch", id}).exit_code, 1);
  CommandResult again = Stoke({"cancel", id});
  EXPECT_EQ(again.exit_code, 5);
  EXPECT_NE(again.err.find("already finished (CANCELLED)"), std::string::npos) << again.err;
  CommandResult missing = Stoke({"status", "999999"});
  EXPECT_EQ(missing.exit_code, 4);
  EXPECT_NE(missing.err.find("job 999999 not found"), std::string::npos) << missing.err;
}

TEST(CliWithoutCoordinator, SaysSoAndExitsThree) {
  CommandResult result = RunCommand({STOKE_CLI_BINARY, "--address", "127.0.0.1:1", "list"});
  EXPECT_EQ(result.exit_code, 3);
  EXPECT_NE(result.err.find("cannot reach a coordinator at 127.0.0.1:1"), std::string::npos)
      << result.err;
}

// Scripts and tools wait for coordinator.address; on a full disk (the file being written
// is /dev/full) the coordinator exits naming it instead of leaving them waiting.
TEST(CoordinatorStartup, AnAddressFileItCannotWriteEndsItNamingTheFile) {
  if (access("/dev/full", W_OK) != 0) GTEST_SKIP() << "no writable /dev/full";
  TempDir dir;
  ASSERT_EQ(symlink("/dev/full", dir.File("coordinator.address.tmp").c_str()), 0);
  // Under timeout(1): a coordinator that ignored the failure would serve on (exit 124).
  CommandResult result =
      RunCommand({"/usr/bin/timeout", "30", STOKE_COORDINATOR_BINARY, "--address", "127.0.0.1:0",
                  "--data-dir", dir.path(), "--local-workers", "0", "--metrics-address", ""});
  EXPECT_EQ(result.exit_code, 1);
  const std::string log = result.out + result.err;
  EXPECT_NE(log.find(dir.File("coordinator.address") + ": cannot write: No space left on device"),
            std::string::npos)
      << log;
}

TEST(CliUsage, UnknownCommandsAndFlagsAreUsageErrors) {
  EXPECT_EQ(RunCommand({STOKE_CLI_BINARY, "frobnicate"}).exit_code, 2);
  EXPECT_EQ(RunCommand({STOKE_CLI_BINARY, "list", "--colour"}).exit_code, 2);
  EXPECT_EQ(RunCommand({STOKE_CLI_BINARY, "--help"}).exit_code, 0);
}

// A local deployment on a unix socket: the coordinator listens on it, says so in its
// address file, its local worker attaches through it, and the CLI trains a job over it.
TEST(UnixSocketTest, ACoordinatorOnAUnixSocketServesTheCliAndItsLocalWorker) {
  TempDir dir;
  CoordinatorProcess::Options options{dir.File("data")};
  options.address = "unix:" + dir.File("stoke.sock");
  options.local_workers = "cpu:1";
  auto coordinator = CoordinatorProcess::Start(options);
  ASSERT_NE(coordinator, nullptr);
  EXPECT_EQ(coordinator->address(), options.address);
  std::ofstream(dir.File("job.yaml")) << "name: over-a-socket\nmodel: {mlp: {hidden: [16]}}\n"
                                      << "data: {synthetic: {features: 8}}\n"
                                      << "training: {steps: 40, batch_size: 16}\n";
  const CommandResult run = RunCommand(
      {STOKE_CLI_BINARY, "--address", options.address, "submit", dir.File("job.yaml"), "--watch"});
  EXPECT_EQ(run.exit_code, 0) << run.out << run.err << coordinator->Log();
  EXPECT_NE(run.out.find("SUCCEEDED"), std::string::npos) << run.out;
}

// A misspelt log level is refused, naming it: spdlog would read it as "off" and the
// coordinator or worker would run on with no log at all.
TEST(StartFlagsTest, AnUnknownLogLevelIsRefusedNotTakenForOff) {
  TempDir dir;
  for (const std::vector<std::string>& command :
       {std::vector<std::string>{STOKE_COORDINATOR_BINARY, "--data-dir", dir.File("d"), "--address",
                                 "127.0.0.1:0", "--local-workers", "0", "--metrics-address", "",
                                 "--log-level", "bogus"},
        std::vector<std::string>{STOKE_WORKER_BINARY, "--coordinator", "127.0.0.1:1", "--log-level",
                                 "bogus"}}) {
    const CommandResult run = RunCommand(command);
    EXPECT_NE(run.exit_code, 0) << command[0];
    EXPECT_NE((run.out + run.err).find("--log-level: bogus not in"), std::string::npos)
        << command[0] << ": " << run.out << run.err;
  }
}

// A deployment sets flags in a --config file (TOML) or in STOKE_COORDINATOR_* and
// STOKE_WORKER_* variables: the command line wins over the file, the file over the
// environment, and a key no flag has is refused, naming it.
TEST(StartFlagsTest, FlagsComeFromAConfigFileAndTheEnvironmentInThatOrder) {
  TempDir dir;
  const std::string config = dir.File("coordinator.toml");
  std::ofstream(config) << "# stoke-coordinator\ndata-dir = \"" << dir.File("from-file")
                        << "\"\nstop-workers = true\n";
  // --stop-workers exits at once, saying which data dir it looked in.
  auto data_dir_of = [](const CommandResult& run) {
    const std::string text = run.out + run.err;
    const size_t on = text.find("left running on ");
    return on == std::string::npos ? text : text.substr(on + 16, text.find('\n', on) - on - 16);
  };
  const std::string env = "STOKE_COORDINATOR_DATA_DIR=" + dir.File("from-env");
  const CommandResult environment = RunCommand({STOKE_COORDINATOR_BINARY, "--stop-workers"}, {env});
  EXPECT_EQ(environment.exit_code, 0) << environment.out << environment.err;
  EXPECT_EQ(data_dir_of(environment), dir.File("from-env"));
  const CommandResult file = RunCommand({STOKE_COORDINATOR_BINARY, "--config", config}, {env});
  EXPECT_EQ(file.exit_code, 0) << file.out << file.err;
  EXPECT_EQ(data_dir_of(file), dir.File("from-file"));
  const CommandResult command_line = RunCommand(
      {STOKE_COORDINATOR_BINARY, "--config", config, "--data-dir", dir.File("from-flag")}, {env});
  EXPECT_EQ(data_dir_of(command_line), dir.File("from-flag"));

  std::ofstream(config, std::ios::app) << "heartbeat-timout = 30\n";
  const CommandResult typo = RunCommand({STOKE_COORDINATOR_BINARY, "--config", config});
  EXPECT_NE(typo.exit_code, 0);
  EXPECT_NE((typo.out + typo.err)
                .find("--config " + config + ": heartbeat-timout is no flag of this program"),
            std::string::npos)
      << typo.out << typo.err;

  // The worker's variables are its own: the coordinator's environment (which local
  // workers inherit) does not set them.
  const CommandResult worker = RunCommand({STOKE_WORKER_BINARY, "--coordinator", "127.0.0.1:1"},
                                          {"STOKE_WORKER_LOG_LEVEL=bogus"});
  EXPECT_NE(worker.exit_code, 0);
  EXPECT_NE((worker.out + worker.err).find("bogus not in"), std::string::npos)
      << worker.out << worker.err;
}

TEST(CliCommandsTest, VersionAndAMistypedCommandAreAnswered) {
  const CommandResult version = RunCommand({STOKE_CLI_BINARY, "--version"});
  EXPECT_EQ(version.exit_code, 0) << version.err;
  EXPECT_EQ(version.out.rfind(std::string("stoke ") + STOKE_VERSION + " (", 0), 0u) << version.out;
  for (const auto& [typed, meant] : std::vector<std::pair<std::string, std::string>>{
           {"sumbit", "submit"}, {"lsit", "list"}, {"cancle", "cancel"}, {"stauts", "status"}}) {
    const CommandResult run = RunCommand({STOKE_CLI_BINARY, typed, "1"});
    EXPECT_EQ(run.exit_code, 2) << typed;
    EXPECT_NE(
        run.err.find(absl::StrCat("stoke: ", typed, " is no command. Did you mean ", meant, "?")),
        std::string::npos)
        << run.err;
  }
  const CommandResult nothing_near = RunCommand({STOKE_CLI_BINARY, "frobnicate"});
  EXPECT_EQ(nothing_near.exit_code, 2);
  EXPECT_EQ(nothing_near.err, "stoke: frobnicate is no command. (`stoke --help` lists them)\n");
}

// --log-format json: every line one JSON object a log shipper reads as it is, however odd
// the text it carries (a data dir with quotes and a backslash in its name).
TEST(StartFlagsTest, JsonLogsAreOneParsableObjectALine) {
  TempDir dir;
  const std::string odd = dir.File("say \"hi\" \\ there");
  const CommandResult run = RunCommand(
      {STOKE_COORDINATOR_BINARY, "--log-format", "json", "--data-dir", odd, "--stop-workers"});
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err;
  std::istringstream lines(run.out + run.err);
  std::string line;
  int parsed = 0;
  bool found = false;
  while (std::getline(lines, line)) {
    const auto json = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    ASSERT_TRUE(json.is_object()) << line;
    EXPECT_EQ(json["level"], "info") << line;
    EXPECT_EQ(json["time"].get<std::string>().size(), 24u) << line;  // 2026-12-06T15:41:49.383Z
    found = found ||
            json["message"].get<std::string>() == "stopped 0 local workers left running on " + odd;
    ++parsed;
  }
  EXPECT_GE(parsed, 1);
  EXPECT_TRUE(found) << run.out << run.err;
}

}  // namespace
}  // namespace stoke::testing

namespace stoke::testing {
namespace {

// `tmux` with a server of the test's own (-L), for what the CLI draws on a real terminal.
// Its commands are given by their short names (new, has).
class Tmux {
 public:
  explicit Tmux(std::string socket) : socket_(std::move(socket)) {}
  ~Tmux() { Run({"kill-server"}); }
  CommandResult Run(std::vector<std::string> args) const {
    args.insert(args.begin(), {"/usr/bin/tmux", "-L", socket_});
    return RunCommand(args);
  }
  // The pane's text, wrapped lines joined (-J): a line that wrapped comes back longer
  // than the pane is wide.
  std::vector<std::string> Lines(const std::string& screen) const {
    std::vector<std::string> lines;
    std::istringstream text(Run({"capture-pane", "-p", "-J", "-t", screen}).out);
    for (std::string line; std::getline(text, line);) lines.push_back(line);
    return lines;
  }
  bool Alive(const std::string& screen) const { return Run({"has", "-t", screen}).exit_code == 0; }

 private:
  std::string socket_;
};

// `stoke watch` and `stoke top` in an 80-column terminal: their live lines do not wrap,
// watch's redraws in place, and `q` quits top.
TEST_F(CliTest, LiveLinesFitEightyColumnsUnderTmuxAndQQuitsTop) {
  if (access("/usr/bin/tmux", X_OK) != 0) GTEST_SKIP() << "no tmux (scripts/setup-deps.sh)";
  std::string file = WriteFile("live.yaml",
                               "name: a-job-with-a-rather-long-name-for-its-line\n"
                               "model: {mlp: {hidden: [16]}}\n"
                               "data: {synthetic: {features: 8}}\n"
                               "training: {steps: 100000000, batch_size: 16}\n"
                               "metrics: {interval_steps: 20}\n");
  CommandResult submit = Stoke({"submit", file});
  ASSERT_EQ(submit.exit_code, 0) << submit.err;
  const std::string id = submit.out.substr(0, submit.out.find('\n'));
  const Tmux tmux(absl::StrCat("stoke-cli-test-", getpid()));
  // `stoke ARGS...` in an 80x24 terminal, on a tmux screen of its own. Each command gets
  // its own screen and the watch's stays open: killing a server's last screen ends the
  // server, and a `tmux new` racing its exit fails.
  auto start = [&](const std::string& screen, std::vector<std::string> args) {
    args.insert(args.begin(),
                {"new", "-d", "-s", screen, "-x", "80", "-y", "24", "env", "TERM=xterm-256color",
                 STOKE_CLI_BINARY, "--address", coordinator_->address()});
    return tmux.Run(args);
  };
  // A line showing `must_show` is on screen, and it (or, with `every_line`, every line)
  // fits 80 columns. Log lines printed above a live line may wrap: they are not cut.
  auto fits = [&](const std::string& screen, const std::string& must_show, bool every_line) {
    bool shown = false;
    for (const std::string& line : tmux.Lines(screen)) {
      const bool showing = line.find(must_show) != std::string::npos;
      if ((showing || every_line) && line.size() > 80) return false;  // ASCII: bytes are columns
      shown = shown || showing;
    }
    return shown;
  };

  ASSERT_EQ(start("watch", {"watch", id}).exit_code, 0);
  EXPECT_TRUE(WaitFor([&] { return fits("watch", "loss", false); }, std::chrono::seconds(30)))
      << absl::StrJoin(tmux.Lines("watch"), "\n");
  // Redrawn in place: one progress line, however many samples have come.
  std::this_thread::sleep_for(std::chrono::seconds(2));
  int progress_lines = 0;
  for (const std::string& line : tmux.Lines("watch")) {
    progress_lines += line.find("loss") != std::string::npos;
  }
  EXPECT_EQ(progress_lines, 1) << absl::StrJoin(tmux.Lines("watch"), "\n");

  ASSERT_EQ(start("top", {"top"}).exit_code, 0);
  EXPECT_TRUE(WaitFor([&] { return fits("top", "q quits", true); }, std::chrono::seconds(30)))
      << absl::StrJoin(tmux.Lines("top"), "\n");
  EXPECT_TRUE(fits("top", "RUNNING", true)) << absl::StrJoin(tmux.Lines("top"), "\n");
  tmux.Run({"send-keys", "-t", "top", "q"});
  EXPECT_TRUE(WaitFor([&] { return !tmux.Alive("top"); }, std::chrono::seconds(10)))
      << "top did not quit on q";
  ASSERT_EQ(Stoke({"cancel", id}).exit_code, 0);
}

}  // namespace
}  // namespace stoke::testing
