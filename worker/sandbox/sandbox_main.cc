// stoke-sandbox: runs a user's program (a Python model's training process, a script job's
// rank) contained, in place of the program itself: see --help, mounts.h, cgroups.h and
// process_tree.h for what contains it, and sandbox_exit.h for how it ends. Single-
// threaded; every descriptor it opens is close-on-exec, so PROGRAM inherits exactly the
// descriptors the worker handed over.
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "worker/sandbox/cgroups.h"
#include "worker/sandbox/mounts.h"
#include "worker/sandbox/process_tree.h"
#include "worker/sandbox/sandbox_exit.h"
#include "worker/sandbox/sandbox_options.h"

namespace stoke::sandbox {
namespace {

// How long the outer waits for the attempt's leftovers to die before it gives up on them.
constexpr std::chrono::seconds kCleanupBound(5);

struct Attempt {
  SandboxOptions options;
  AttemptCgroup cgroup;
  ProgramSpec program;
};

// The inner process: pid 1 of the new pid namespace. It joins the cgroup, builds the root,
// becomes the user, starts PROGRAM and stays as its init until PROGRAM ends; then writes
// PROGRAM's wait status to `verdict` (an exit code cannot tell a signal from exit(139)).
[[noreturn]] void RunInit(const Attempt& attempt, int parent_alive, int verdict) {
  // A group of its own: a signal to the outer's group reaches it only through the outer.
  setpgid(0, 0);
  if (!DieWithParent(parent_alive)) _exit(kSandboxSetupFailed);
  const SandboxOptions& options = attempt.options;
  std::string error;
  if (!attempt.cgroup.Join(&error) ||
      !EnterSandboxRoot({options.read_only, options.read_write, options.hidden}, &error) ||
      !DropPrivileges({options.uid, options.gid}, &error)) {
    ExitSaying(kSandboxSetupFailed, error);
  }
  // The change of user cleared the parent-death signal.
  if (!DieWithParent(parent_alive)) _exit(kSandboxSetupFailed);
  close(parent_alive);
  const pid_t program = fork();
  if (program < 0) ExitSaying(kSandboxSetupFailed, absl::StrCat("cannot fork: ", strerror(errno)));
  if (program == 0) ExecProgram(attempt.program);
  setpgid(program, program);  // as PROGRAM does: no signal finds the group missing
  // Exiting takes the rest of the namespace with it (the kernel SIGKILLs it).
  const int status = WaitForwarding(program, true, true);
  ssize_t unused = write(verdict, &status, sizeof status);
  (void)unused;
  _exit(ExitCodeOf(status));
}

// Namespaces refused here (a container without CAP_SYS_ADMIN, a kernel without them or
// with unprivileged user namespaces turned off): the caller falls back to the subreaper.
bool NamespacesRefused(int error) {
  return error == EPERM || error == EINVAL || error == ENOSYS || error == ENOSPC || error == EUSERS;
}

// Whether an unprivileged user namespace here may mount (a throwaway child tries): some
// hosts allow the namespace but deny what it is for (Ubuntu's AppArmor restriction of
// unprivileged user namespaces), which would fail every attempt midway through its root.
bool UnprivilegedMountsWork(uid_t uid, gid_t gid) {
  const pid_t probe = fork();
  if (probe == 0) {
    std::string error;
    const bool works = unshare(CLONE_NEWUSER | CLONE_NEWNS) == 0 &&
                       MapOwnIdsInNewUserNamespace(uid, gid, &error) &&
                       mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) == 0 &&
                       mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "size=4k") == 0;
    _exit(works ? 0 : 1);
  }
  int status = 0;
  return probe > 0 && waitpid(probe, &status, 0) == probe && WIFEXITED(status) &&
         WEXITSTATUS(status) == 0;
}

// PROGRAM under an init of its own in new pid, mount, IPC and UTS namespaces (not the
// network's: a job's ranks reach each other and the coordinator over TCP). Without root
// (a worker run by an ordinary user, as the quickstart's local workers are), in a user
// namespace of its own too, which gives it the right to build the root and nothing more:
// PROGRAM stays the caller's uid. The outer unshares the mount namespace too, only to
// learn up front whether it may: the init makes its own. Returns PROGRAM's exit code, or
// -1 when the namespaces were refused; `program_signal` is the signal that ended PROGRAM.
int RunInNamespaces(const Attempt& attempt, int* program_signal) {
  const uid_t uid = geteuid();
  const gid_t gid = getegid();
  const bool unprivileged = uid != 0;
  if (unprivileged && !UnprivilegedMountsWork(uid, gid)) {
    SayLine(
        "an unprivileged user namespace here may not mount: only the process tree is "
        "contained");
    return -1;
  }
  const int kinds =
      CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWUTS | (unprivileged ? CLONE_NEWUSER : 0);
  if (unshare(kinds) != 0) {
    if (!NamespacesRefused(errno)) {
      SayLine(absl::StrCat("cannot make namespaces: ", strerror(errno)));
      return kSandboxSetupFailed;
    }
    SayLine(absl::StrCat("no namespaces here (unshare: ", strerror(errno),
                         "): only the process tree is contained"));
    return -1;
  }
  std::string error;
  if (unprivileged && !MapOwnIdsInNewUserNamespace(uid, gid, &error)) {
    SayLine(error);
    return kSandboxSetupFailed;
  }
  int alive[2], verdict[2];
  if (pipe2(alive, O_CLOEXEC) != 0 || pipe2(verdict, O_CLOEXEC) != 0) return kSandboxSetupFailed;
  const pid_t init = fork();
  if (init < 0) {
    SayLine(absl::StrCat("cannot fork: ", strerror(errno)));
    return kSandboxSetupFailed;
  }
  if (init == 0) {
    close(alive[1]);
    close(verdict[0]);
    RunInit(attempt, alive[0], verdict[1]);
  }
  close(alive[0]);
  close(verdict[1]);
  setpgid(init, init);
  const int status = WaitForwarding(init, false, false);
  close(alive[1]);
  int program_status = 0;
  if (read(verdict[0], &program_status, sizeof program_status) == sizeof program_status &&
      WIFSIGNALED(program_status)) {
    *program_signal = WTERMSIG(program_status);
  }
  close(verdict[0]);
  return ExitCodeOf(status);
}

// Without namespaces: PROGRAM as the outer's child, the outer a subreaper that kills all
// PROGRAM left behind once PROGRAM ends.
int RunAsSubreaper(const Attempt& attempt, int* program_signal) {
  int alive[2];
  if (prctl(PR_SET_CHILD_SUBREAPER, 1) != 0 || pipe2(alive, O_CLOEXEC) != 0) {
    SayLine(absl::StrCat("cannot become a subreaper: ", strerror(errno)));
    return kSandboxSetupFailed;
  }
  const pid_t program = fork();
  if (program == 0) {
    close(alive[1]);
    std::string error;
    if (!attempt.cgroup.Join(&error) ||
        !DropPrivileges({attempt.options.uid, attempt.options.gid}, &error)) {
      ExitSaying(kSandboxSetupFailed, error);
    }
    if (!DieWithParent(alive[0])) _exit(kSandboxSetupFailed);
    close(alive[0]);
    ExecProgram(attempt.program);
  }
  close(alive[0]);
  if (program < 0) return kSandboxSetupFailed;
  setpgid(program, program);
  const int status = WaitForwarding(program, true, true);
  if (WIFSIGNALED(status)) *program_signal = WTERMSIG(status);
  if (!KillDescendants(kCleanupBound)) SayLine("some processes of the attempt would not die");
  close(alive[1]);
  return ExitCodeOf(status);
}

std::string MiB(uint64_t bytes) {
  char text[32];
  const double mib = static_cast<double>(bytes) / (1 << 20);
  snprintf(text, sizeof text, bytes % (1 << 20) == 0 ? "%.0f" : "%.1f", mib);
  return text;
}

// After PROGRAM: nothing of the attempt left in its cgroup, the OOM killer's verdict
// read, the cgroup removed.
int Finish(const Attempt& attempt, int exit_code) {
  if (attempt.cgroup.empty()) return exit_code;
  if (!attempt.cgroup.KillAllAndWaitEmpty(kCleanupBound)) {
    SayLine("the attempt's cgroup would not empty: its processes are left behind");
  }
  const bool out_of_memory = attempt.cgroup.OutOfMemory(exit_code);
  std::string error;
  if (!attempt.cgroup.Remove(&error)) SayLine(error);
  if (!out_of_memory) return exit_code;
  SayLine(absl::StrCat("the job went over its memory limit of ", MiB(attempt.options.memory_bytes),
                       " MiB and was killed"));
  return kSandboxOutOfMemory;
}

// Ends this process by `signal`, as PROGRAM ended, so that the worker names the signal
// (SIGSEGV: "signal 11 (Segmentation fault)"); without a core dump of the sandbox's own.
void EndBySignal(int signal) {
  const rlimit no_core = {0, 0};
  setrlimit(RLIMIT_CORE, &no_core);
  ::signal(signal, SIG_DFL);
  sigset_t only;
  sigemptyset(&only);
  sigaddset(&only, signal);
  sigprocmask(SIG_UNBLOCK, &only, nullptr);
  raise(signal);
}

// The options, checked; exits on --help (0) or a mistake (126).
SandboxOptions OptionsOrExit(int argc, char** argv) {
  SandboxOptions options;
  std::string error;
  if (!ParseSandboxOptions(argc, argv, &options, &error)) ExitSaying(kSandboxSetupFailed, error);
  if (options.help) {
    fputs(SandboxUsage().c_str(), stdout);
    exit(0);
  }
  if (!CheckSandboxOptions(options, geteuid() == 0, &error)) {
    ExitSaying(kSandboxSetupFailed, error);
  }
  return options;
}

int Run(int argc, char** argv) {
  // A parent that ignored SIGCHLD would have its children reaped by the kernel, out of
  // waitpid's sight; PROGRAM gets the default as well.
  signal(SIGCHLD, SIG_DFL);
  Attempt attempt;
  attempt.options = OptionsOrExit(argc, argv);
  const SandboxOptions& options = attempt.options;
  char start_dir[4096];
  attempt.program = {options.program, options.workdir,
                     getcwd(start_dir, sizeof start_dir) ? start_dir : "", BlockSignals()};
  if (!options.cgroup.empty()) {
    std::vector<std::string> notes;
    std::string error;
    const bool created = attempt.cgroup.Create(
        options.cgroup_parent, options.cgroup,
        {options.memory_bytes, options.pids, options.cpu_weight}, &notes, &error);
    for (const std::string& note : notes) SayLine(note);
    if (!created) {
      SayLine(error);
      return Finish(attempt, kSandboxSetupFailed);
    }
  }
  int program_signal = 0;
  int exit_code = options.namespaces ? RunInNamespaces(attempt, &program_signal) : -1;
  if (exit_code < 0) exit_code = RunAsSubreaper(attempt, &program_signal);
  exit_code = Finish(attempt, exit_code);
  if (program_signal != 0 && exit_code == 128 + program_signal) EndBySignal(program_signal);
  return exit_code;
}

}  // namespace
}  // namespace stoke::sandbox

int main(int argc, char** argv) { return stoke::sandbox::Run(argc, argv); }
