#include "worker/link/child_process.h"

#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/match.h"
#include "files/posix_files.h"

extern char** environ;

namespace stoke::worker {
namespace {

// The worker's variables a child keeps: where programs, libraries and Python packages
// are, the device and library switches, locale and time. Nothing else: tokens, keys and
// addresses the worker was given stay with the worker.
bool Inherited(const std::string& name) {
  static const char* const kExact[] = {"PATH",
                                       "LANG",
                                       "TZ",
                                       "TMPDIR",
                                       "LD_LIBRARY_PATH",
                                       "PYTHONPATH",
                                       "PYTHONHOME",
                                       "OMP_NUM_THREADS",
                                       "STOKE_PYTHON",
                                       "HOME"};
  static const char* const kPrefixes[] = {"LC_",       "CUDA_",          "NVIDIA_",     "NCCL_",
                                          "TORCH_",    "TORCHINDUCTOR_", "TRITON_",     "MKL_",
                                          "OPENBLAS_", "KMP_",           "STOKE_TRACE_"};
  for (const char* exact : kExact) {
    if (name == exact) return true;
  }
  for (const char* prefix : kPrefixes) {
    if (absl::StartsWith(name, prefix)) return true;
  }
  return false;
}

}  // namespace

absl::StatusOr<JobUser> LookUpJobUser(const std::string& name) {
  std::vector<char> buffer(16384);
  passwd entry;
  passwd* found = nullptr;
  getpwnam_r(name.c_str(), &entry, buffer.data(), buffer.size(), &found);
  if (found == nullptr) {
    return absl::NotFoundError(absl::StrCat("--job-user ", name, ": no such user on this host"));
  }
  if (found->pw_uid == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--job-user ", name, ": is root; name an unprivileged user"));
  }
  return JobUser{name, found->pw_uid, found->pw_gid, found->pw_dir ? found->pw_dir : "/"};
}

int HighDescriptor(int fd) {
  if (fd < 0 || fd >= 5) return fd;
  const int moved = fcntl(fd, F_DUPFD_CLOEXEC, 5);
  close(fd);
  return moved;
}

bool Pipe::Open() {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return false;
  read = HighDescriptor(fds[0]);
  write = HighDescriptor(fds[1]);
  return read >= 0 && write >= 0;
}

void Pipe::Close(int& fd) {
  if (fd >= 0) close(fd);
  fd = -1;
}

void Pipe::CloseBoth() {
  Close(read);
  Close(write);
}

std::vector<std::string> ChildEnvironment(const std::optional<JobUser>& user,
                                          const std::vector<std::string>& extra) {
  std::vector<std::string> env;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    const std::string text = *entry;
    const std::string name = text.substr(0, text.find('='));
    if (user && name == "HOME") continue;
    if (Inherited(name)) env.push_back(text);
  }
  if (user) {
    env.push_back("HOME=" + user->home);
    env.push_back("USER=" + user->name);
    env.push_back("LOGNAME=" + user->name);
  }
  for (const std::string& variable : extra) {
    const std::string name = variable.substr(0, variable.find('=') + 1);
    env.erase(std::remove_if(env.begin(), env.end(),
                             [&](const std::string& e) { return absl::StartsWith(e, name); }),
              env.end());
    env.push_back(variable);
  }
  return env;
}

pid_t SpawnChild(const std::vector<std::string>& args, const std::vector<std::string>& env,
                 const std::vector<int>& fds, const std::optional<JobUser>& user,
                 const std::string& workdir) {
  // Everything the child needs, made before the fork: between fork and exec only
  // async-signal-safe calls.
  std::vector<std::string> arg_copies = args, env_copies = env;
  std::vector<char*> argv, envp;
  for (auto& a : arg_copies) argv.push_back(a.data());
  argv.push_back(nullptr);
  for (auto& e : env_copies) envp.push_back(e.data());
  envp.push_back(nullptr);
  const pid_t parent = getpid();
  const int count = static_cast<int>(fds.size());
  const pid_t pid = fork();
  if (pid != 0) {
    if (pid > 0) setpgid(pid, pid);  // also here: no race with a kill of the group
    return pid;
  }
  setpgid(0, 0);
  // The worker's blocked signals (it waits for SIGTERM on a thread of its own) would stay
  // blocked across exec.
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  // The handed descriptors all lie at 5 and above (HighDescriptor), so none is overwritten.
  for (int i = 0; i < count; ++i) {
    if (dup2(fds[static_cast<size_t>(i)], i) < 0) _exit(126);
  }
  // Every other descriptor of the worker (its link to the coordinator among them) closes.
  if (syscall(SYS_close_range, static_cast<unsigned>(count), ~0u, 0u) != 0) {
    for (int fd = count; fd < 65536; ++fd) close(fd);
  }
  if (!workdir.empty() && chdir(workdir.c_str()) != 0) _exit(126);
  if (user) {
    const gid_t gid = user->gid;
    if (setgroups(1, &gid) != 0 || setgid(user->gid) != 0 || setuid(user->uid) != 0) _exit(126);
  }
  // After the change of user, which clears it: the child dies with the worker's thread.
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(126);
  prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
  execve(argv[0], argv.data(), envp.data());
  _exit(127);
}

std::string BesideThisProgram(const std::string& name) {
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) return "";
  const std::string path(self, static_cast<size_t>(n));
  const std::string beside = path.substr(0, path.rfind('/') + 1) + name;
  return files::Exists(beside) ? beside : "";
}

std::string SignalName(int signal) {
  const char* description = strsignal(signal);
  return absl::StrCat("signal ", signal, " (", description ? description : "unknown", ")");
}

}  // namespace stoke::worker
