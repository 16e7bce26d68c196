#include "server/core/local_workers.h"

#include <fcntl.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace stoke::server {
namespace {

// Runs `binary --list-devices` and returns the CUDA devices it reports ("cuda:0", ...).
// The worker is the only binary that links LibTorch, so it is the one that can tell.
absl::StatusOr<std::vector<std::string>> ListCudaDevices(const std::string& binary) {
  std::string command = absl::StrCat("'", binary, "' --list-devices 2>/dev/null");
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) return absl::InternalError(absl::StrCat("cannot run ", binary));
  std::string output;
  char buf[512];
  while (fgets(buf, sizeof(buf), pipe)) output += buf;
  int rc = pclose(pipe);
  if (rc != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(binary, " --list-devices failed (exit ", WEXITSTATUS(rc),
                     "); is the worker built? set --worker-binary"));
  }
  std::vector<std::string> devices;
  for (absl::string_view line : absl::StrSplit(output, '\n', absl::SkipEmpty())) {
    std::vector<std::string> fields = absl::StrSplit(line, ' ');
    if (!fields.empty() && absl::StartsWith(fields[0], "cuda:")) devices.push_back(fields[0]);
  }
  return devices;
}

std::vector<LocalWorkerSpec> CpuWorkers(int n) {
  // Split the cores between the workers rather than letting each use all of them.
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::vector<LocalWorkerSpec> workers;
  for (int i = 0; i < n; ++i) workers.push_back({absl::StrCat("cpu:", i), std::max(1, cores / n)});
  return workers;
}

}  // namespace

absl::StatusOr<std::vector<LocalWorkerSpec>> PlanLocalWorkers(const std::string& flag,
                                                              const std::string& worker_binary) {
  if (flag == "0" || flag == "none") return std::vector<LocalWorkerSpec>{};
  absl::string_view rest = flag;
  int n = 0;
  if (absl::ConsumePrefix(&rest, "cpu:")) {
    if (!absl::SimpleAtoi(rest, &n) || n < 1 || n > 256) {
      return absl::InvalidArgumentError(
          absl::StrCat("--local-workers ", flag, ": expected cpu:N with N from 1 to 256"));
    }
    return CpuWorkers(n);
  }
  if (flag != "auto" && (!absl::SimpleAtoi(flag, &n) || n < 1 || n > 256)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--local-workers ", flag, ": expected auto, a number, cpu:N or 0"));
  }
  auto gpus = ListCudaDevices(worker_binary);
  if (!gpus.ok()) return gpus.status();
  if (gpus->empty()) return CpuWorkers(flag == "auto" ? 2 : n);
  std::vector<LocalWorkerSpec> workers;
  for (const auto& gpu : *gpus) {
    if (flag != "auto" && static_cast<int>(workers.size()) == n) break;
    workers.push_back({gpu, 0});
  }
  return workers;
}

absl::StatusOr<std::unique_ptr<LocalWorkerSupervisor>> LocalWorkerSupervisor::Create(
    Options options) {
  if (access(options.worker_binary.c_str(), X_OK) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("worker binary ", options.worker_binary, " is missing or not executable"));
  }
  return std::unique_ptr<LocalWorkerSupervisor>(new LocalWorkerSupervisor(std::move(options)));
}

LocalWorkerSupervisor::~LocalWorkerSupervisor() { Stop(); }

absl::Status LocalWorkerSupervisor::Start() {
  children_.resize(options_.workers.size());
  for (auto& child : children_) {
    child.next_start = absl::InfinitePast();
    child.delay = options_.min_restart_delay;
  }
  // Children are forked from the monitor thread: PR_SET_PDEATHSIG fires when the thread
  // that forked exits, and this one lives as long as the supervisor.
  monitor_ = std::thread([this] { Monitor(); });
  return absl::OkStatus();
}

pid_t LocalWorkerSupervisor::Spawn(size_t index) {
  const LocalWorkerSpec& spec = options_.workers[index];
  // Everything the child needs is prepared before fork: after it, only async-signal-safe
  // calls until exec.
  std::vector<std::string> args = {options_.worker_binary,
                                   "--coordinator",
                                   options_.coordinator_address,
                                   "--device",
                                   spec.device,
                                   "--local"};
  if (spec.threads > 0) {
    args.push_back("--threads");
    args.push_back(std::to_string(spec.threads));
  }
  if (!options_.join_token_file.empty()) {
    args.push_back("--join-token-file");
    args.push_back(options_.join_token_file);
  }
  if (!options_.tls_ca.empty()) {
    args.push_back("--tls-ca");
    args.push_back(options_.tls_ca);
  }
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::string log_path = absl::StrCat(options_.log_dir, "/worker-", index, ".log");
  const pid_t parent = getpid();

  pid_t pid = fork();
  if (pid == 0) {
    // The coordinator blocks SIGINT/SIGTERM to sigwait for them; the mask survives exec.
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(1);  // the parent died before prctl took effect
    int fd = open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd >= 0) {
      dup2(fd, STDOUT_FILENO);
      dup2(fd, STDERR_FILENO);
    }
    setpgid(0, 0);  // a terminal's Ctrl-C reaches the coordinator, which stops us in order
    execv(argv[0], argv.data());
    _exit(127);
  }
  if (pid < 0) {
    spdlog::error("cannot start worker {}: fork failed", spec.device);
  } else {
    spdlog::info("started local worker {} (pid {}), log {}", spec.device, pid, log_path);
  }
  return pid;
}

void LocalWorkerSupervisor::Monitor() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    const absl::Time now = absl::Now();
    for (size_t i = 0; i < children_.size(); ++i) {
      Child& child = children_[i];
      if (child.pid > 0) {
        int status = 0;
        if (waitpid(child.pid, &status, WNOHANG) != child.pid) continue;
        std::string how = WIFSIGNALED(status) ? absl::StrCat("killed by signal ", WTERMSIG(status))
                                              : absl::StrCat("exited with ", WEXITSTATUS(status));
        // A worker that ran a good while earns a fresh backoff; one crashing at start
        // backs off further each time.
        child.delay = (now - child.started > absl::Minutes(1))
                          ? options_.min_restart_delay
                          : std::min(child.delay * 2, options_.max_restart_delay);
        spdlog::warn("local worker {} (pid {}) {}; restarting in {}", options_.workers[i].device,
                     child.pid, how, absl::FormatDuration(child.delay));
        child.pid = -1;
        child.next_start = now + child.delay;
      }
      if (child.pid < 0 && now >= child.next_start) {
        child.pid = Spawn(i);
        child.started = now;
        if (child.pid < 0) child.next_start = now + child.delay;
      }
    }
    cv_.wait_for(lock, std::chrono::milliseconds(200));
  }
  // Still on the forking thread: leaving it would SIGKILL the workers at once, and they
  // deserve a chance to report and exit cleanly.
  const absl::Duration grace = grace_;
  lock.unlock();
  TerminateChildren(grace);
}

void LocalWorkerSupervisor::Stop(absl::Duration grace) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_ || !monitor_.joinable()) return;
    stopping_ = true;
    grace_ = grace;
  }
  cv_.notify_all();
  monitor_.join();
}

void LocalWorkerSupervisor::TerminateChildren(absl::Duration grace) {
  for (auto& child : children_) {
    if (child.pid > 0) kill(child.pid, SIGTERM);
  }
  const absl::Time deadline = absl::Now() + grace;
  for (auto& child : children_) {
    while (child.pid > 0) {
      if (waitpid(child.pid, nullptr, WNOHANG) == child.pid) {
        child.pid = -1;
      } else if (absl::Now() > deadline) {
        kill(child.pid, SIGKILL);
        waitpid(child.pid, nullptr, 0);
        child.pid = -1;
      } else {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    }
  }
}

}  // namespace stoke::server
