#include "worker/sandbox/process_tree.h"

#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"
#include "worker/sandbox/sandbox_exit.h"

namespace stoke::sandbox {
namespace {

constexpr int kForwarded[] = {SIGTERM, SIGINT, SIGHUP, SIGUSR1, SIGUSR2};

sigset_t WaitedSignals() {
  sigset_t set;
  sigemptyset(&set);
  for (int signal : kForwarded) sigaddset(&set, signal);
  sigaddset(&set, SIGCHLD);
  return set;
}

// Reaps what has ended without waiting; true once `child` was among it.
bool ReapEnded(pid_t child, bool reap_all, int* status) {
  for (;;) {
    int ended_status = 0;
    const pid_t ended = waitpid(reap_all ? -1 : child, &ended_status, WNOHANG);
    if (ended <= 0) return false;
    if (ended == child) {
      *status = ended_status;
      return true;
    }
  }
}

// The parent pid in /proc/PID/stat: the field after the state, itself after the command
// name, which may hold spaces and parentheses (hence the last ')').
pid_t ParentOf(const char* pid) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%s/stat", pid);
  const int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  char text[1024];
  const ssize_t n = read(fd, text, sizeof text - 1);
  close(fd);
  if (n <= 0) return -1;
  text[n] = '\0';
  const char* end_of_name = strrchr(text, ')');
  char state = 0;
  int parent = -1;
  if (end_of_name == nullptr || sscanf(end_of_name + 1, " %c %d", &state, &parent) != 2) {
    return -1;
  }
  return parent;
}

// SIGKILLs each process whose parent is the caller; false when there was none.
bool KillChildren() {
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return false;
  const pid_t self = getpid();
  bool any = false;
  while (const dirent* entry = readdir(proc)) {
    if (entry->d_name[0] < '1' || entry->d_name[0] > '9') continue;
    if (ParentOf(entry->d_name) == self) {
      kill(static_cast<pid_t>(atoi(entry->d_name)), SIGKILL);
      any = true;
    }
  }
  closedir(proc);
  return any;
}

}  // namespace

sigset_t BlockSignals() {
  const sigset_t waited = WaitedSignals();
  sigset_t original;
  sigprocmask(SIG_BLOCK, &waited, &original);
  return original;
}

bool DropPrivileges(const Credentials& credentials, std::string* error) {
  if (credentials.uid && credentials.gid) {
    const uid_t uid = *credentials.uid;
    const gid_t gid = *credentials.gid;
    // Only root holds supplementary groups it could drop; anyone else keeps theirs.
    if (setgroups(0, nullptr) != 0 && geteuid() == 0) {
      *error = absl::StrCat("cannot drop the supplementary groups: ", strerror(errno));
      return false;
    }
    if (setresgid(gid, gid, gid) != 0 || setresuid(uid, uid, uid) != 0) {
      *error = absl::StrCat("cannot become uid ", uid, " gid ", gid, ": ", strerror(errno));
      return false;
    }
  }
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
    *error = absl::StrCat("cannot set no_new_privs: ", strerror(errno));
    return false;
  }
  return true;
}

namespace {

bool WriteProcFile(const char* name, const std::string& text, std::string* error) {
  const std::string path = absl::StrCat("/proc/self/", name);
  const int fd = open(path.c_str(), O_WRONLY | O_CLOEXEC);
  const bool written =
      fd >= 0 && write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  if (!written) *error = absl::StrCat("cannot write ", path, ": ", strerror(errno));
  if (fd >= 0) close(fd);
  return written;
}

}  // namespace

bool MapOwnIdsInNewUserNamespace(uid_t uid, gid_t gid, std::string* error) {
  return WriteProcFile("setgroups", "deny", error) &&
         WriteProcFile("uid_map", absl::StrCat(uid, " ", uid, " 1\n"), error) &&
         WriteProcFile("gid_map", absl::StrCat(gid, " ", gid, " 1\n"), error);
}

bool DieWithParent(int parent_alive) {
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) return false;
  pollfd watch = {parent_alive, POLLIN, 0};
  return poll(&watch, 1, 0) == 0;  // nothing to read and no hang-up: the parent lives
}

void ExecProgram(const ProgramSpec& spec) {
  setpgid(0, 0);
  if (!spec.workdir.empty()) {
    if (chdir(spec.workdir.c_str()) != 0) {
      ExitSaying(kSandboxSetupFailed,
                 absl::StrCat("cannot enter the workdir ", spec.workdir, ": ", strerror(errno)));
    }
  } else if (spec.start_dir.empty() || chdir(spec.start_dir.c_str()) != 0) {
    if (chdir("/") != 0) ExitSaying(kSandboxSetupFailed, "cannot enter /");
  }
  std::vector<std::string> args = spec.argv;
  std::vector<char*> argv;
  argv.reserve(args.size() + 1);
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  sigprocmask(SIG_SETMASK, &spec.mask, nullptr);
  execvp(argv[0], argv.data());
  ExitSaying(kSandboxProgramNotRun,
             absl::StrCat("cannot run ", spec.argv[0], ": ", strerror(errno)));
}

int WaitForwarding(pid_t child, bool to_group, bool reap_all) {
  const sigset_t waited = WaitedSignals();
  for (;;) {
    int status = 0;
    if (ReapEnded(child, reap_all, &status)) return status;
    siginfo_t info;
    // A second's timeout: a lost SIGCHLD (a parent that ignored it) costs a second, no more.
    const timespec second = {1, 0};
    const int signal = sigtimedwait(&waited, &info, &second);
    if (signal <= 0 || signal == SIGCHLD) continue;
    // The group is gone when PROGRAM left it (setsid): then PROGRAM alone.
    if (!to_group || kill(-child, signal) != 0) kill(child, signal);
  }
}

bool KillDescendants(std::chrono::milliseconds bound) {
  const auto deadline = std::chrono::steady_clock::now() + bound;
  for (;;) {
    KillChildren();
    pid_t reaped;
    while ((reaped = waitpid(-1, nullptr, WNOHANG)) > 0) {
    }
    // No child at all: every descendant was reparented here before its parent was reaped,
    // so none is left anywhere.
    if (reaped < 0 && errno == ECHILD) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

int ExitCodeOf(int wait_status) {
  if (WIFEXITED(wait_status)) return WEXITSTATUS(wait_status);
  if (WIFSIGNALED(wait_status)) return 128 + WTERMSIG(wait_status);
  return kSandboxSetupFailed;
}

}  // namespace stoke::sandbox
