#include "server/core/local_workers.h"

#include <fcntl.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/wait.h>
#include <unistd.h>

#include <dirent.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <functional>
#include <optional>
#include <thread>

#include "absl/strings/match.h"
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

namespace {

// Field 22 of /proc/PID/stat, the process's start time in clock ticks since boot: with the
// pid, it names one process, never a later one that reused the pid. nullopt when the
// process is gone or a zombie.
std::optional<uint64_t> ProcessStartTime(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/stat"));
  std::string line;
  if (!std::getline(in, line)) return std::nullopt;
  const auto close_paren = line.rfind(')');
  if (close_paren == std::string::npos) return std::nullopt;
  std::vector<std::string> fields =
      absl::StrSplit(line.substr(close_paren + 2), ' ', absl::SkipEmpty());
  // fields[0] is field 3 (the state).
  uint64_t start = 0;
  if (fields.size() < 20 || fields[0] == "Z" || !absl::SimpleAtoi(fields[19], &start)) {
    return std::nullopt;
  }
  return start;
}

struct PidRecord {
  pid_t pid = -1;
  uint64_t start_time = 0;
  std::string device;
};

std::optional<PidRecord> ReadPidFile(const std::string& path) {
  std::ifstream in(path);
  PidRecord record;
  if (!(in >> record.pid >> record.start_time >> record.device) || record.pid <= 0) {
    return std::nullopt;
  }
  return record;
}

// The recorded worker still runs (the same process, not one that reused its pid).
bool StillRunning(const PidRecord& record) {
  auto start = ProcessStartTime(record.pid);
  return start && *start == record.start_time;
}

void WritePidFile(const std::string& path, pid_t pid, const std::string& device) {
  // The child may not have been scheduled yet; /proc knows it from fork on.
  auto start = ProcessStartTime(pid);
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << pid << " " << start.value_or(0) << " " << device << "\n";
    if (!out) {
      spdlog::error("cannot write {}: a restarted coordinator will not find worker {}", path, pid);
      return;
    }
  }
  std::rename(tmp.c_str(), path.c_str());
}

// Waits for a process already sent SIGTERM to end, and SIGKILLs it past `deadline`;
// `alive` says whether it still runs.
void Terminate(pid_t pid, const std::function<bool()>& alive, absl::Time deadline) {
  while (alive()) {
    if (absl::Now() > deadline) {
      kill(pid, SIGKILL);
      for (int i = 0; i < 100 && alive(); ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<LocalWorkerSupervisor>> LocalWorkerSupervisor::Create(
    Options options) {
  if (access(options.worker_binary.c_str(), X_OK) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("worker binary ", options.worker_binary, " is missing or not executable"));
  }
  return std::unique_ptr<LocalWorkerSupervisor>(new LocalWorkerSupervisor(std::move(options)));
}

LocalWorkerSupervisor::~LocalWorkerSupervisor() { Stop(); }

std::string LocalWorkerSupervisor::PidFile(size_t index) const {
  return absl::StrCat(options_.state_dir, "/worker-", index, ".pid");
}

absl::Status LocalWorkerSupervisor::Start() {
  children_.resize(options_.workers.size());
  for (size_t i = 0; i < children_.size(); ++i) {
    Child& child = children_[i];
    child.next_start = absl::InfinitePast();
    child.delay = options_.min_restart_delay;
    if (options_.state_dir.empty()) continue;
    // A worker an earlier coordinator started on this device and left training: it
    // reattaches by itself; a second one on its device would only fight it.
    auto record = ReadPidFile(PidFile(i));
    if (record && record->device == options_.workers[i].device && StillRunning(*record)) {
      child.pid = record->pid;
      child.adopted = true;
      child.started = absl::Now();
      spdlog::info("local worker {} (pid {}) is still running from before; supervising it",
                   record->device, record->pid);
    }
  }
  monitor_ = std::thread([this] { Monitor(); });
  return absl::OkStatus();
}

size_t LocalWorkerSupervisor::Running() {
  std::lock_guard<std::mutex> lock(mu_);
  return std::count_if(children_.begin(), children_.end(),
                       [](const Child& c) { return c.pid > 0; });
}

size_t LocalWorkerSupervisor::StopLeftWorkers(const std::string& state_dir, absl::Duration grace) {
  std::vector<std::pair<std::string, PidRecord>> running;
  if (DIR* dir = opendir(state_dir.c_str())) {
    while (dirent* entry = readdir(dir)) {
      const std::string name = entry->d_name;
      if (!absl::StartsWith(name, "worker-") || !absl::EndsWith(name, ".pid")) continue;
      const std::string path = absl::StrCat(state_dir, "/", name);
      auto record = ReadPidFile(path);
      if (record && StillRunning(*record)) running.emplace_back(path, *record);
      if (!record || !StillRunning(*record)) std::remove(path.c_str());
    }
    closedir(dir);
  }
  for (const auto& [path, record] : running) kill(record.pid, SIGTERM);
  const absl::Time deadline = absl::Now() + grace;
  for (const auto& [path, record] : running) {
    spdlog::info("stopping local worker {} (pid {})", record.device, record.pid);
    Terminate(
        record.pid, [r = record] { return StillRunning(r); }, deadline);
    std::remove(path.c_str());
  }
  return running.size();
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
  if (!options_.address_file.empty()) {
    args.push_back("--coordinator-address-file");
    args.push_back(options_.address_file);
  }
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
  args.insert(args.end(), options_.worker_flags.begin(), options_.worker_flags.end());
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::string log_path = absl::StrCat(options_.log_dir, "/worker-", index, ".log");

  pid_t pid = fork();
  if (pid == 0) {
    // The coordinator blocks SIGINT/SIGTERM to sigwait for them; the mask survives exec.
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    int fd = open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd >= 0) {
      dup2(fd, STDOUT_FILENO);
      dup2(fd, STDERR_FILENO);
    }
    // A session of its own: neither a terminal's Ctrl-C nor the end of the coordinator's
    // session reaches it. It trains on through a coordinator restart.
    setsid();
    execv(argv[0], argv.data());
    _exit(127);
  }
  if (pid < 0) {
    spdlog::error("cannot start worker {}: fork failed", spec.device);
  } else {
    spdlog::info("started local worker {} (pid {}), log {}", spec.device, pid, log_path);
    if (!options_.state_dir.empty()) WritePidFile(PidFile(index), pid, spec.device);
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
        std::string how;
        if (child.adopted) {
          // Not our child: no exit status to wait for, only whether it still runs.
          if (ProcessStartTime(child.pid)) continue;
          how = "has exited";
        } else {
          int status = 0;
          if (waitpid(child.pid, &status, WNOHANG) != child.pid) continue;
          how = WIFSIGNALED(status) ? absl::StrCat("killed by signal ", WTERMSIG(status))
                                    : absl::StrCat("exited with ", WEXITSTATUS(status));
        }
        child.adopted = false;
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
  const absl::Duration grace = grace_;
  const bool terminate = terminate_;
  lock.unlock();
  if (terminate) TerminateChildren(grace);
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

void LocalWorkerSupervisor::Leave() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_ || !monitor_.joinable()) return;
    stopping_ = true;
    terminate_ = false;
  }
  cv_.notify_all();
  monitor_.join();
}

void LocalWorkerSupervisor::TerminateChildren(absl::Duration grace) {
  for (auto& child : children_) {
    if (child.pid > 0) kill(child.pid, SIGTERM);
  }
  const absl::Time deadline = absl::Now() + grace;
  for (size_t i = 0; i < children_.size(); ++i) {
    Child& child = children_[i];
    if (child.pid <= 0) continue;
    const pid_t pid = child.pid;
    if (child.adopted) {
      Terminate(
          pid, [pid] { return ProcessStartTime(pid).has_value(); }, deadline);
    } else {
      Terminate(
          pid, [pid] { return waitpid(pid, nullptr, WNOHANG) == 0; }, deadline);
      waitpid(pid, nullptr, WNOHANG);
    }
    child.pid = -1;
    if (!options_.state_dir.empty()) std::remove(PidFile(i).c_str());
  }
}

}  // namespace stoke::server
