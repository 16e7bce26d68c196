// Jobs written to do harm, on a coordinator whose local workers contain user code as they
// do by default (as root: a uid per owner, each attempt in stoke-sandbox): a Python model
// reads the coordinator's store, tokens, TLS key and another owner's job, writes that
// job's checkpoints, looks for the coordinator's process, leaves a setsid() grandchild
// behind, forks without end, allocates past the memory limit, plants links for the root
// worker to follow through 20 attempts, or floods its log; a submitter sends a label
// bomb. Each is contained, the worker serves on, and nothing of the other job changes.
// Needs root (as CI runs), as such a worker does.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "files/posix_files.h"
#include "security/token_hash.h"
#include "tests/support/coordinator_process.h"
#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"
#include "tests/support/wait.h"

namespace stoke::testing {
namespace {

// Each probe prints "PROBE <what>: contained" when its harm failed, "LEAKED" when it
// worked. The factory runs them before the model trains; the model itself is harmless.
constexpr const char* kHostile = R"PY(
import os, subprocess, time
import torch
from torch import nn

def probe(what, harm):
    try:
        harm()
        print("PROBE %s: LEAKED" % what, flush=True)
    except Exception as e:
        print("PROBE %s: contained (%s)" % (what, type(e).__name__), flush=True)

def read(path):
    with open(path, "rb") as f:
        f.read(1)

def write(path):
    with open(path, "ab") as f:
        f.write(b"planted")

def find_coordinator():
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                if b"stoke-coordinator" in open("/proc/%s/cmdline" % pid, "rb").read():
                    return
            except OSError:
                pass
    raise LookupError("no coordinator in sight")

def fork_bomb():
    children = 0
    for _ in range(2000):
        try:
            pid = os.fork()
        except OSError:
            break
        if pid == 0:
            time.sleep(600)
            os._exit(0)
        children += 1
    print("forked %d children" % children, flush=True)
    if children >= 2000:
        return
    raise OSError("stopped at %d" % children)

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(16, 4)

    def forward(self, x):
        return self.a(x)

def hostile(data_dir, tokens, other_job, marker, bomb=False, tls_key=None):
    probe("store", lambda: read(data_dir + "/stoke.db"))
    probe("join token", lambda: read(data_dir + "/local-worker.token"))
    probe("tokens file", lambda: read(tokens))
    if tls_key:
        probe("tls key", lambda: read(tls_key))
    probe("data dir write", lambda: write(data_dir + "/planted"))
    probe("other job read", lambda: os.listdir(other_job))
    probe("other job checkpoint", lambda: write(other_job + "/checkpoints/planted"))
    probe("coordinator process", find_coordinator)
    subprocess.Popen(["sleep", marker], start_new_session=True)
    if bomb:
        probe("fork bomb", fork_bomb)
    return Net()

def hog(mib):
    kept = torch.ones(mib << 18)  # every page written
    print("PROBE memory: LEAKED (%d MiB)" % (kept.numel() >> 18), flush=True)
    return Net()

def plain():
    return Net()

class FailsAtStep3(Net):
    steps = 0

    def forward(self, x):
        self.steps += 1
        if self.steps == 3:
            raise RuntimeError("this attempt ends here")
        return self.a(x)

def swapper(target):
    # The trainer starts in <job>/attempts/<n>/rank-0: plant links where the root worker
    # goes next (the next attempt's folder, the checkpoints), swap them without pause from
    # a setsid() child, and fail at step 3 so that the job is tried again.
    rank = os.getcwd()
    attempt = os.path.dirname(rank)
    job = os.path.dirname(os.path.dirname(attempt))
    following = "%s/attempts/%d" % (job, int(os.path.basename(attempt)) + 1)
    def plant():
        for link in (following, job + "/checkpoints"):
            try:
                if os.path.isdir(link) and not os.path.islink(link):
                    os.rename(link, "%s.%d" % (link, time.time_ns()))
                os.symlink(target, link)
            except OSError:
                pass
        try:
            os.link(target + "/secret", job + "/secret-link")
        except OSError:
            pass
    plant()
    if os.fork() == 0:
        os.setsid()
        while True:
            plant()
            try:
                os.unlink(following)
                os.mkdir(following)
                os.rmdir(following)
            except OSError:
                pass
    return FailsAtStep3()

def flood(seconds):
    end = time.time() + seconds
    lines = 0
    while time.time() < end:
        print("y" * 40)
        lines += 1
    print("FLOOD printed %d lines" % lines, flush=True)
    return Net()
)PY";

constexpr const char* kMarker = "487.25";

class HostileJobsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (geteuid() != 0) return;
    dir_ = new TempDir();
    std::ofstream(dir_->File("tokens"))
        << "root admin " << security::HashToken("stk_root") << "\n"
        << "alice submitter " << security::HashToken("stk_alice") << "\nbob submitter "
        << security::HashToken("stk_bob") << "\n";
    chmod(dir_->File("tokens").c_str(), 0600);
    std::ofstream(dir_->File("model.py")) << kHostile;
    // TLS as a shared coordinator has it: its key is one more secret out of the jobs' reach.
    const CommandResult tls =
        RunCommand({"/usr/bin/openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days",
                    "2", "-keyout", dir_->File("tls.key"), "-out", dir_->File("tls.pem"), "-subj",
                    "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1"});
    if (tls.exit_code != 0) ADD_FAILURE() << tls.err;
    CoordinatorProcess::Options options{dir_->File("data")};
    options.local_workers = "cpu:1";
    // No --job-users: the default range, as on any worker run as root.
    options.extra_args = {"--heartbeat-timeout",
                          "6",
                          "--auth-tokens",
                          dir_->File("tokens"),
                          "--tls-cert",
                          dir_->File("tls.pem"),
                          "--tls-key",
                          dir_->File("tls.key"),
                          "--local-worker-flag=--job-memory=768M",
                          "--local-worker-flag=--job-pids=200"};
    options.client_token = "stk_root";
    options.client_tls_ca = dir_->File("tls.pem");
    coordinator_ = CoordinatorProcess::Start(options).release();
  }
  static void TearDownTestSuite() {
    delete coordinator_;
    delete dir_;
  }
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root, as a worker with --job-users does";
    ASSERT_NE(coordinator_, nullptr);
  }

  // Submits model.py's `factory` with `args` as `token`'s owner; the job's id, once ended.
  static std::string Run(const std::string& token, const std::string& factory,
                         const std::string& args, int checkpoint_every = 0, int max_restarts = 0) {
    const std::string path = dir_->File("job-" + factory + ".yaml");
    std::ofstream(path) << "name: " << factory << "\nmodel:\n  python:\n    file: model.py\n"
                        << "    factory: " << factory << "\n    args: " << args
                        << "\ndata:\n  synthetic: {features: 16, num_classes: 4}\n"
                        << "training: {steps: 4, batch_size: 8}\nmax_restarts: " << max_restarts
                        << "\n"
                        << (checkpoint_every > 0 ? "checkpoint: {interval_steps: " +
                                                       std::to_string(checkpoint_every) + "}\n"
                                                 : "");
    return SubmitAndWait(path, token);
  }

  // Submits the job file at `path` as `token`'s owner; the job's id, once ended.
  static CommandResult Cli(const std::vector<std::string>& args, const std::string& token) {
    std::vector<std::string> argv = {STOKE_CLI_BINARY, "--address", coordinator_->address()};
    argv.insert(argv.end(), args.begin(), args.end());
    return RunCommand(argv, {"STOKE_TOKEN=" + token, "STOKE_TLS_CA=" + dir_->File("tls.pem")});
  }

  static std::string SubmitAndWait(const std::string& path, const std::string& token) {
    const CommandResult submit = Cli({"submit", path}, token);
    EXPECT_EQ(submit.exit_code, 0) << submit.err;
    const std::string id = submit.out.substr(0, submit.out.find('\n'));
    EXPECT_TRUE(WaitFor(
        [&] {
          auto job = coordinator_->client().GetJob(id);
          return job.ok() &&
                 (job->state() == v1::JOB_STATE_SUCCEEDED || job->state() == v1::JOB_STATE_FAILED);
        },
        std::chrono::seconds(180)))
        << coordinator_->Log();
    return id;
  }

  static v1::Job Job(const std::string& id) { return *coordinator_->client().GetJob(id); }

  static std::string Logs(const std::string& id) { return Cli({"logs", id}, "stk_root").out; }

  static std::string JobFolder(const std::string& id) { return dir_->File("data/jobs/" + id); }

  // Processes still running `sleep kMarker`, anywhere on the machine.
  static int Survivors() {
    int found = 0;
    for (const std::string& pid : files::ListDirectory("/proc")) {
      std::ifstream cmdline("/proc/" + pid + "/cmdline");
      std::string text((std::istreambuf_iterator<char>(cmdline)), {});
      if (text.find(std::string("sleep") + '\0' + kMarker) != std::string::npos) ++found;
    }
    return found;
  }

  static TempDir* dir_;
  static CoordinatorProcess* coordinator_;
};

TempDir* HostileJobsTest::dir_ = nullptr;
CoordinatorProcess* HostileJobsTest::coordinator_ = nullptr;

TEST_F(HostileJobsTest, AModelCannotReachTheCoordinatorAnotherJobOrOutliveItsAttempt) {
  const std::string bobs = Run("stk_bob", "plain", "{}", 2);
  ASSERT_EQ(Job(bobs).state(), v1::JOB_STATE_SUCCEEDED) << Job(bobs).message();
  const std::vector<std::string> bobs_files_before =
      files::ListDirectory(JobFolder(bobs) + "/checkpoints");

  std::ostringstream args;
  args << "{data_dir: " << dir_->File("data") << ", tokens: " << dir_->File("tokens")
       << ", other_job: " << JobFolder(bobs) << ", marker: '" << kMarker
       << "', tls_key: " << dir_->File("tls.key") << "}";
  const std::string alices = Run("stk_alice", "hostile", args.str());
  const std::string logs = Logs(alices);
  EXPECT_EQ(Job(alices).state(), v1::JOB_STATE_SUCCEEDED) << Job(alices).message() << logs;
  for (const char* what : {"store", "join token", "tokens file", "tls key", "data dir write",
                           "other job read", "other job checkpoint", "coordinator process"}) {
    EXPECT_NE(logs.find(std::string("PROBE ") + what + ": contained"), std::string::npos)
        << what << " was not contained:\n"
        << logs;
  }
  EXPECT_EQ(logs.find("LEAKED"), std::string::npos) << logs;
  // The grandchild that called setsid() and the bomb's children ended with the attempt.
  EXPECT_TRUE(WaitFor([] { return Survivors() == 0; }, std::chrono::seconds(10)))
      << Survivors() << " processes outlived their job";
  EXPECT_EQ(files::ListDirectory(JobFolder(bobs) + "/checkpoints"), bobs_files_before);
  EXPECT_FALSE(files::Exists(dir_->File("data/planted")));
  // Each owner's folder is its own user's alone.
  struct stat alice_folder {
  }, bob_folder{};
  stat(JobFolder(alices).c_str(), &alice_folder);
  stat(JobFolder(bobs).c_str(), &bob_folder);
  EXPECT_NE(alice_folder.st_uid, bob_folder.st_uid);
  EXPECT_GE(alice_folder.st_uid, 61000u);
  EXPECT_EQ(alice_folder.st_mode & 0777, 0700u);
}

// A script job goes through the same sandbox: the probes of the model, as a script.
TEST_F(HostileJobsTest, AScriptCannotReachTheCoordinatorOrOutliveItsAttempt) {
  const std::string bobs = Run("stk_bob", "plain", "{}", 2);
  const std::string folder = dir_->File("script");
  ASSERT_TRUE(files::MakeDirectories(folder, nullptr));
  std::ofstream(folder + "/model.py") << kHostile;
  std::ofstream(folder + "/probe.py")
      << "import sys\nfrom model import hostile\nhostile(*sys.argv[1:])\n";
  const std::string path = dir_->File("script.yaml");
  std::ofstream(path) << "name: script\ncommand:\n  argv: [python, probe.py, " << dir_->File("data")
                      << ", " << dir_->File("tokens") << ", " << JobFolder("1") << ", '" << kMarker
                      << "']\n  workdir: " << folder << "\nmax_restarts: 0\n";
  const std::string id = SubmitAndWait(path, "stk_alice");
  const std::string logs = Logs(id);
  EXPECT_EQ(Job(id).state(), v1::JOB_STATE_SUCCEEDED) << Job(id).message() << logs;
  EXPECT_NE(logs.find("PROBE store: contained"), std::string::npos) << logs;
  EXPECT_EQ(logs.find("LEAKED"), std::string::npos) << logs;
  EXPECT_TRUE(WaitFor([] { return Survivors() == 0; }, std::chrono::seconds(10)))
      << Survivors() << " processes outlived their job";
}

TEST_F(HostileJobsTest, AForkBombIsHeldToTheProcessLimitAndEndsWithItsAttempt) {
  std::ostringstream args;
  args << "{data_dir: /nonexistent, tokens: /nonexistent, other_job: /nonexistent, marker: '"
       << kMarker << "', bomb: true}";
  const std::string bomb = Run("stk_alice", "hostile", args.str());
  const std::string logs = Logs(bomb);
  // Its own threads then fail too (the children hold the limit): the job's end, not the
  // worker's.
  EXPECT_NE(logs.find("PROBE fork bomb: contained"), std::string::npos) << logs;
  EXPECT_EQ(logs.find("LEAKED"), std::string::npos) << logs;
  EXPECT_TRUE(WaitFor([] { return Survivors() == 0; }, std::chrono::seconds(10)))
      << Survivors() << " processes outlived their job";
  const std::string next = Run("stk_bob", "plain", "{}");
  EXPECT_EQ(Job(next).state(), v1::JOB_STATE_SUCCEEDED) << Job(next).message();
}

TEST_F(HostileJobsTest, AModelPastItsMemoryLimitFailsNamingItAndTheWorkerServesOn) {
  const std::string hog = Run("stk_alice", "hog", "{mib: 2048}");
  const v1::Job job = Job(hog);
  EXPECT_EQ(job.state(), v1::JOB_STATE_FAILED);
  EXPECT_NE(job.message().find("memory limit"), std::string::npos) << job.message();
  EXPECT_EQ(Logs(hog).find("LEAKED"), std::string::npos);
  const std::string next = Run("stk_bob", "plain", "{}");
  EXPECT_EQ(Job(next).state(), v1::JOB_STATE_SUCCEEDED) << Job(next).message();
}

// Links planted in the job folder for the root worker to follow, swapped without pause
// while each attempt runs, through 20 attempts: nothing outside the job folder is handed
// to the job's user or written, and the worker serves on.
TEST_F(HostileJobsTest, LinksPlantedForTheRootWorkerThrough20AttemptsRedirectNothing) {
  const std::string target = dir_->File("root-only");
  ASSERT_TRUE(files::MakeDirectories(target, nullptr));
  chmod(target.c_str(), 0700);
  std::ofstream(target + "/secret") << "root's";
  chmod((target + "/secret").c_str(), 0600);
  const std::string id =
      Run("stk_alice", "swapper", "{target: " + target + "}", /*checkpoint_every=*/0, 19);
  const v1::Job job = Job(id);
  EXPECT_EQ(job.state(), v1::JOB_STATE_FAILED);
  EXPECT_EQ(job.attempt(), 20u) << job.message();
  EXPECT_NE(job.message().find("this attempt ends here"), std::string::npos) << job.message();
  std::vector<std::string> entries = files::ListDirectory(target);
  EXPECT_EQ(entries, std::vector<std::string>{"secret"});
  for (const std::string& path : {target, target + "/secret"}) {
    struct stat st {};
    ASSERT_EQ(stat(path.c_str(), &st), 0) << path;
    EXPECT_EQ(st.st_uid, 0u) << path << " was handed over";
    EXPECT_EQ(st.st_mode & 0777, path == target ? 0700u : 0600u) << path;
  }
  std::ifstream secret(target + "/secret");
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(secret), {}), "root's");
  const std::string next = Run("stk_bob", "plain", "{}");
  EXPECT_EQ(Job(next).state(), v1::JOB_STATE_SUCCEEDED) << Job(next).message();
}

// A job that prints without end stores its log budget's worth (a burst of 1 MiB, then
// 32 KiB a second), and its log says how many lines were dropped.
TEST_F(HostileJobsTest, ALogFloodStoresItsBudgetAndSaysHowManyLinesWereDropped) {
  const std::string id = Run("stk_alice", "flood", "{seconds: 6}");
  const v1::Job job = Job(id);
  EXPECT_EQ(job.state(), v1::JOB_STATE_SUCCEEDED) << job.message();
  const std::string logs = Logs(id);
  EXPECT_NE(logs.find("log lines ("), std::string::npos) << logs.substr(logs.size() - 2000);
  EXPECT_NE(logs.find("dropped: the job printed faster than its log budget"), std::string::npos);
  // The burst, the rate over the job's life (well under a minute here), and some slack.
  EXPECT_LT(job.log_bytes(), (1u << 20) + 60u * (32u << 10)) << job.log_bytes();
  EXPECT_GT(job.log_bytes(), 1u << 19);
  const std::string next = Run("stk_bob", "plain", "{}");
  EXPECT_EQ(Job(next).state(), v1::JOB_STATE_SUCCEEDED) << Job(next).message();
}

// An 8-line image manifest whose labels are integers near 2^40 once took the coordinator
// down (a class name made per value); now it is refused, naming the file and line, and the
// coordinator serves on (how fast is the readers' unit tests' business: a bound on memory).
TEST_F(HostileJobsTest, ALabelBombIsRefusedAtSubmissionNamingTheFileAndLine) {
  ASSERT_TRUE(files::MakeDirectories(dir_->File("data/datasets"), nullptr));
  const std::string manifest = dir_->File("data/datasets/bomb.csv");  // in a data root
  {
    std::ofstream out(manifest);
    out << "path,label\n";
    for (int i = 0; i < 8; ++i) out << "img" << i << ".png," << (1099511627776LL + i) << "\n";
  }
  const std::string path = dir_->File("bomb.yaml");
  std::ofstream(path) << "name: bomb\nmodel: {cnn: {channels: [8], hidden: 16}}\n"
                      << "data:\n  images: {manifest: " << manifest << ", size: 32}\n"
                      << "training: {steps: 4, batch_size: 8}\n";
  const CommandResult submit = Cli({"submit", path}, "stk_alice");
  EXPECT_NE(submit.exit_code, 0);
  EXPECT_NE(submit.err.find(manifest + ":2: label 1099511627776 is over the 8 files listed"),
            std::string::npos)
      << submit.err;
  const std::string next = Run("stk_bob", "plain", "{}");
  EXPECT_EQ(Job(next).state(), v1::JOB_STATE_SUCCEEDED) << Job(next).message();
}

}  // namespace
}  // namespace stoke::testing
