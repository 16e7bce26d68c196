// stoke-sandbox running real programs as an unprivileged user: what a job's code can see
// and write, that nothing it starts outlives it, its limits, its exit status and signals,
// and the descriptors the worker hands it. As root (the worker runs it as root); each test
// skips, saying why, where that or the namespaces or cgroups it needs are not to be had.
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"
#include "worker/sandbox/sandbox_exit.h"

namespace stoke::testing {
namespace {

// A user and group with no passwd entry: a job's user as the worker would pick one.
constexpr uid_t kUid = 61000;
constexpr gid_t kGid = 61000;

::testing::AssertionResult Holds(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "\"" << text << "\" does not hold \"" << part << "\"";
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Whether this process may make the namespaces stoke-sandbox makes (in a child, so that
// this one keeps its own).
bool CanUnshare() {
  const pid_t pid = fork();
  if (pid == 0) {
    _exit(unshare(CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS) == 0 ? 0 : 1);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

// Live processes whose command line is exactly `argv` (zombies have none).
int CountProcesses(const std::vector<std::string>& argv) {
  std::string wanted;
  for (const std::string& arg : argv) wanted.append(arg).push_back('\0');
  int count = 0;
  DIR* proc = opendir("/proc");
  while (const dirent* entry = proc ? readdir(proc) : nullptr) {
    if (entry->d_name[0] < '1' || entry->d_name[0] > '9') continue;
    if (ReadAll(absl::StrCat("/proc/", entry->d_name, "/cmdline")) == wanted) ++count;
  }
  if (proc) closedir(proc);
  return count;
}

// Whether `done` comes true within `bound`, asking every 20 ms.
bool Eventually(const std::function<bool()>& done, std::chrono::seconds bound) {
  const auto deadline = std::chrono::steady_clock::now() + bound;
  while (!done()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

// A duration no other process sleeps for: its sleeps are this test's markers.
std::string MarkerDuration(int which) { return absl::StrCat("300.", getpid(), which); }

class SandboxTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) {
      GTEST_SKIP() << "stoke-sandbox's tests run as root (it changes users, mounts and cgroups)";
    }
    // The job's user must be able to reach the bound folders beneath it.
    chmod(dir_.path().c_str(), 0755);
  }

  void RequireNamespaces() {
    if (!CanUnshare()) GTEST_SKIP() << "unshare of mount and pid namespaces is refused here";
  }

  std::string Folder(const std::string& name, uid_t owner = 0) {
    std::string path = dir_.File(name);
    mkdir(path.c_str(), 0755);
    if (chown(path.c_str(), owner, owner) != 0) ADD_FAILURE() << "chown " << path;
    return path;
  }

  std::string File(const std::string& name, const std::string& text) {
    std::ofstream(dir_.File(name)) << text;
    return dir_.File(name);
  }

  // stoke-sandbox as the worker runs it: as root, for the job's user.
  std::vector<std::string> Command(const std::vector<std::string>& flags,
                                   const std::vector<std::string>& program) const {
    std::vector<std::string> argv = {STOKE_SANDBOX_BINARY, "--uid", std::to_string(kUid), "--gid",
                                     std::to_string(kGid)};
    argv.insert(argv.end(), flags.begin(), flags.end());
    argv.push_back("--");
    argv.insert(argv.end(), program.begin(), program.end());
    return argv;
  }

  CommandResult Sandbox(const std::vector<std::string>& flags, const std::string& script) const {
    return RunCommand(Command(flags, {"/bin/sh", "-c", script}));
  }

  std::string Cgroup(const std::string& what) const {
    return absl::StrCat("sandbox-test-", getpid(), "-", what);
  }

  TempDir dir_;
};

TEST_F(SandboxTest, RunsAsTheJobsUserWritingOnlyWhereItMay) {
  RequireNamespaces();
  const std::string rw = Folder("rw", kUid), ro = Folder("ro", kUid);
  const CommandResult result =
      Sandbox({"--ro", ro, "--rw", rw},
              absl::StrCat("id -u; id -g; id -G; echo written > ", rw, "/out; if echo no > ", ro,
                           "/out; then echo ro-writable; else echo ro-refused; fi"));
  EXPECT_EQ(result.exit_code, 0) << result.err;
  EXPECT_EQ(result.out, "61000\n61000\n61000\nro-refused\n") << result.err;
  EXPECT_TRUE(Holds(result.err, "Read-only file system"));
  struct stat st;
  ASSERT_EQ(stat((rw + "/out").c_str(), &st), 0) << "the file written in the rw folder is gone";
  EXPECT_EQ(st.st_uid, kUid);
  EXPECT_EQ(ReadAll(rw + "/out"), "written\n");
  EXPECT_NE(access((ro + "/out").c_str(), F_OK), 0);
}

TEST_F(SandboxTest, SeesNeitherUnboundNorHiddenFiles) {
  RequireNamespaces();
  const std::string secret = File("token", "s3cret-of-the-worker");
  const std::string data = Folder("data");
  Folder("data/keys");
  const std::string token = File("data/token", "hidden-token");
  const std::string key = File("data/keys/key.pem", "hidden-key");
  File("data/shown", "shown-data");
  const CommandResult result = Sandbox(
      {"--ro", data, "--hide", token, "--hide", data + "/keys", "--hide", data + "/missing"},
      absl::StrCat("cat ", secret, "; cat ", token, "; cat ", key, "; cat ", data,
                   "/shown; ls -d /root /var/lib"));
  EXPECT_TRUE(Holds(result.out, "shown-data")) << result.err;
  for (const char* hidden : {"s3cret", "hidden-token", "hidden-key"}) {
    EXPECT_FALSE(Holds(result.out, hidden)) << "the program read " << hidden;
  }
  EXPECT_TRUE(Holds(result.err, secret + ": No such file or directory"));
  EXPECT_TRUE(Holds(result.err, key + ": No such file or directory"));
  EXPECT_TRUE(Holds(result.err, "/root': No such file or directory"));
  // The test's own view (the host's) still has them.
  EXPECT_EQ(ReadAll(secret), "s3cret-of-the-worker");
  EXPECT_EQ(ReadAll(token), "hidden-token");
  EXPECT_EQ(ReadAll(key), "hidden-key");
}

TEST_F(SandboxTest, TmpIsPrivate) {
  RequireNamespaces();
  const std::string name = absl::StrCat("stoke-sandbox-private-", getpid());
  const CommandResult result = Sandbox({}, absl::StrCat("echo x > /tmp/", name, " && ls /tmp"));
  EXPECT_EQ(result.exit_code, 0) << result.err;
  EXPECT_TRUE(Holds(result.out, name));
  EXPECT_NE(access(("/tmp/" + name).c_str(), F_OK), 0) << "the program's /tmp file is the host's";
}

// Starts sleeps that leave the program's process group and tree (setsid, a shell that exits),
// checks that they run, and exits 0 without waiting for them.
std::string LeaveSleepsBehind(const std::string& duration) {
  return absl::StrCat(
      "setsid sleep ", duration, " >/dev/null 2>&1 & setsid sh -c 'sleep ", duration, " & sleep ",
      duration, " &' >/dev/null 2>&1; ", "for i in 1 2 3 4 5 6 7 8 9 10; do [ $(pgrep -fc '^sleep ",
      duration, "') -ge 3 ] && break; sleep 0.1; done; pgrep -fc '^sleep ", duration, "'; exit 0");
}

TEST_F(SandboxTest, NothingOutlivesTheAttempt) {
  RequireNamespaces();
  const std::string duration = MarkerDuration(1);
  const CommandResult result = Sandbox({}, LeaveSleepsBehind(duration));
  EXPECT_EQ(result.exit_code, 0) << result.err;
  EXPECT_EQ(result.out, "3\n") << "the program's sleeps did not all start";
  EXPECT_EQ(CountProcesses({"sleep", duration}), 0) << "sleep " << duration << " outlived it";
}

TEST_F(SandboxTest, NothingOutlivesTheAttemptWithoutNamespaces) {
  const std::string duration = MarkerDuration(2);
  const CommandResult result = Sandbox({"--no-namespaces"}, LeaveSleepsBehind(duration));
  EXPECT_EQ(result.exit_code, 0) << result.err;
  EXPECT_EQ(result.out, "3\n") << "the program's sleeps did not all start";
  EXPECT_EQ(CountProcesses({"sleep", duration}), 0) << "sleep " << duration << " outlived it";
}

// The worker's last word to an attempt, its grace over, is SIGKILL to stoke-sandbox: the
// attempt's init dies with it (PR_SET_PDEATHSIG), and the kernel kills the rest of its pid
// namespace, those that called setsid() included.
TEST_F(SandboxTest, KillingTheSandboxKillsTheAttempt) {
  RequireNamespaces();
  const std::string duration = MarkerDuration(4);
  BackgroundProcess sandbox(
      Command({}, {"/bin/sh", "-c",
                   absl::StrCat("setsid sleep ", duration, " >/dev/null 2>&1 & sleep ", duration,
                                " >/dev/null 2>&1 & wait")}),
      {dir_.File("log")});
  ASSERT_TRUE(Eventually(
      [&] {
        return CountProcesses({"sleep", duration}) == 2;
      },
      std::chrono::seconds(20)))
      << sandbox.Log();
  sandbox.Signal(SIGKILL);
  EXPECT_EQ(sandbox.Wait(), 128 + SIGKILL);
  EXPECT_TRUE(Eventually(
      [&] {
        return CountProcesses({"sleep", duration}) == 0;
      },
      std::chrono::seconds(5)))
      << "sleep " << duration << " outlived the killed sandbox";
}

TEST_F(SandboxTest, ForkBombIsContained) {
  RequireNamespaces();
  const std::string duration = MarkerDuration(3);
  const auto start = std::chrono::steady_clock::now();
  const CommandResult result =
      Sandbox({"--cgroup", Cgroup("pids"), "--pids", "64"},
              absl::StrCat("i=0; while [ $i -lt 500 ]; do sleep ", duration,
                           " >/dev/null 2>&1 & i=$((i+1)); done; echo started-all"));
  if (Holds(result.err, "going on without limits") || Holds(result.err, "no pids controller")) {
    GTEST_SKIP() << "no pids controller to limit with: " << result.err;
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(60));
  EXPECT_FALSE(Holds(result.out, "started-all")) << "500 processes started under --pids 64";
  EXPECT_TRUE(Holds(result.err, "fork"));
  EXPECT_EQ(CountProcesses({"sleep", duration}), 0) << "sleep " << duration << " outlived it";
  EXPECT_EQ(RunCommand({"/bin/true"}).exit_code, 0) << "the machine cannot start a program";
  for (const char* hierarchy : {"", "/pids", "/memory", "/cpu"}) {
    const std::string group = absl::StrCat("/sys/fs/cgroup", hierarchy, "/stoke/", Cgroup("pids"));
    EXPECT_NE(access(group.c_str(), F_OK), 0) << group << " was left behind";
  }
}

TEST_F(SandboxTest, GoingOverTheMemoryLimitEndsTheAttemptSayingSo) {
  RequireNamespaces();
  if (access("/usr/bin/python3", X_OK) != 0) GTEST_SKIP() << "no /usr/bin/python3 here";
  const CommandResult result = RunCommand(Command(
      {"--cgroup", Cgroup("memory"), "--memory", "64M"},
      {"/usr/bin/python3", "-c", "b = bytearray(512*1024*1024); b[::4096] = b'x'*len(b[::4096])"}));
  if (Holds(result.err, "going on without limits") || Holds(result.err, "no memory controller")) {
    GTEST_SKIP() << "no memory controller to limit with: " << result.err;
  }
  EXPECT_EQ(result.exit_code, sandbox::kSandboxOutOfMemory) << result.err;
  EXPECT_TRUE(Holds(result.err,
                    "stoke-sandbox: the job went over its memory limit of 64 MiB and was killed"));
}

// execv's view of `args` (which must outlive it), null-terminated.
std::vector<char*> ExecArgv(std::vector<std::string>& args) {
  std::vector<char*> argv;
  argv.reserve(args.size() + 1);
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  return argv;
}

// The raw wait status of `argv`, run with its output thrown away.
int WaitStatusOf(std::vector<std::string> args) {
  std::vector<char*> argv = ExecArgv(args);
  const pid_t pid = fork();
  if (pid == 0) {
    const int null = open("/dev/null", O_WRONLY);
    dup2(null, 1);
    dup2(null, 2);
    execv(argv[0], argv.data());
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return status;
}

TEST_F(SandboxTest, PassesTheProgramsExitStatusThrough) {
  RequireNamespaces();
  EXPECT_EQ(Sandbox({}, "exit 3").exit_code, 3);
  // A program killed by a signal ends the sandbox by the same signal, so that the worker
  // names it: an exit status of 139 would not tell a segfault from exit(139).
  for (int signal : {SIGTERM, SIGSEGV}) {
    const int status =
        WaitStatusOf(Command({}, {"/bin/sh", "-c", absl::StrCat("kill -", signal, " $$")}));
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == signal) << "wait status " << status;
  }
  const int exited = WaitStatusOf(Command({}, {"/bin/sh", "-c", "exit 139"}));
  EXPECT_TRUE(WIFEXITED(exited) && WEXITSTATUS(exited) == 139) << "wait status " << exited;
}

TEST_F(SandboxTest, SigtermReachesTheProgram) {
  RequireNamespaces();
  const std::string log = dir_.File("log");
  BackgroundProcess sandbox(
      Command({}, {"/bin/sh", "-c",
                   "trap 'echo got-term; exit 7' TERM; echo ready; while :; do sleep 0.1; done"}),
      {log});
  ASSERT_TRUE(Eventually([&] { return Holds(sandbox.Log(), "ready"); }, std::chrono::seconds(20)))
      << sandbox.Log();
  sandbox.Signal(SIGTERM);
  EXPECT_EQ(sandbox.Wait(), 7) << sandbox.Log();
  EXPECT_TRUE(Holds(sandbox.Log(), "got-term"));
}

TEST_F(SandboxTest, SetupFailureNamesWhatFailed) {
  RequireNamespaces();
  const CommandResult missing = Sandbox({"--ro", "/does/not/exist"}, "true");
  EXPECT_EQ(missing.exit_code, sandbox::kSandboxSetupFailed);
  EXPECT_TRUE(
      Holds(missing.err,
            "stoke-sandbox: cannot bind /does/not/exist read-only: No such file or directory"));
  const CommandResult as_root = RunCommand({STOKE_SANDBOX_BINARY, "--", "/bin/true"});
  EXPECT_EQ(as_root.exit_code, sandbox::kSandboxSetupFailed);
  EXPECT_TRUE(Holds(as_root.err, "--uid"));
}

// A worker run by an ordinary user (the quickstart's local workers) gets the same root,
// processes and /tmp through a user namespace of its own; the program stays that user.
TEST_F(SandboxTest, AnOrdinaryUsersWorkerGetsTheSameRootInAUserNamespace) {
  const std::string rw = Folder("rw", kUid), ro = Folder("ro", kUid);
  const std::string secret = File("token", "s3cret-of-the-coordinator");
  chmod(secret.c_str(), 0644);  // even a file the user could read outside stays out
  const std::string duration = MarkerDuration(9);
  const CommandResult result = RunCommand(
      {"/usr/bin/setpriv", "--reuid", std::to_string(kUid), "--regid", std::to_string(kGid),
       "--clear-groups", STOKE_SANDBOX_BINARY, "--ro", ro, "--rw", rw, "--", "/bin/sh", "-c",
       absl::StrCat("id -u; echo written > ", rw, "/out; echo no > ", ro,
                    "/out || echo ro-refused;", "cat ", secret,
                    " || echo secret-hidden; ls /proc | grep -c '^[0-9]'; ", "setsid sleep ",
                    duration, " >/dev/null 2>&1 & exit 0")});
  // Only a host that refuses the namespaces skips (stoke-sandbox then says so and runs
  // the program uncontained); a sandbox that fails to set up fails the test.
  if (result.err.find("no namespaces here") != std::string::npos ||
      result.err.find("may not mount") != std::string::npos) {
    GTEST_SKIP() << "unprivileged user namespaces are refused here: " << result.err;
  }
  EXPECT_EQ(result.exit_code, 0) << result.err;
  // Its uid; ro refused; the secret unseen; /proc shows the init, sh, ls, grep and sleep.
  EXPECT_TRUE(Holds(result.out, "61000\nro-refused\nsecret-hidden\n")) << result.err;
  EXPECT_EQ(ReadAll(rw + "/out"), "written\n");
  EXPECT_EQ(CountProcesses({"sleep", duration}), 0) << "sleep " << duration << " outlived it";
}

// The worker talks to the training process over descriptors 3 and 4: they reach PROGRAM
// as they are, and nothing of stoke-sandbox's own comes with them.
TEST_F(SandboxTest, HandedDescriptorsReachTheProgramAndNoOthers) {
  RequireNamespaces();
  int channel[2];
  ASSERT_EQ(pipe(channel), 0);
  std::vector<std::string> args =
      Command({}, {"/bin/sh", "-c", "echo hello >&3; exec ls -1 /proc/self/fd >&3"});
  std::vector<char*> argv = ExecArgv(args);
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(channel[1], 3);
    syscall(SYS_close_range, 4u, ~0u, 0u);  // the worker hands over 0..3 and no more
    execv(argv[0], argv.data());
    _exit(127);
  }
  close(channel[1]);
  std::string text;
  char buffer[256];
  ssize_t n;
  while ((n = read(channel[0], buffer, sizeof buffer)) > 0) text.append(buffer, n);
  close(channel[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  // ls's own listing of /proc/self/fd takes the lowest free descriptor, 4.
  EXPECT_EQ(text, "hello\n0\n1\n2\n3\n4\n");
}

}  // namespace
}  // namespace stoke::testing
