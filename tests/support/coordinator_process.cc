#include "tests/support/coordinator_process.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "tests/support/wait.h"

namespace stoke::testing {

bool ProcessAlive(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return false;
  // Field 3 is the state; Z is a zombie: dead, not yet reaped.
  auto close_paren = line.rfind(')');
  return close_paren != std::string::npos && close_paren + 2 < line.size() &&
         line[close_paren + 2] != 'Z';
}

std::unique_ptr<CoordinatorProcess> CoordinatorProcess::Start(const Options& options) {
  std::unique_ptr<CoordinatorProcess> process(new CoordinatorProcess());
  process->options_ = options;
  const std::string address_file = options.data_dir + "/coordinator.address";
  std::filesystem::create_directories(options.data_dir);
  std::filesystem::remove(address_file);  // a killed coordinator leaves its file behind

  std::vector<std::string> args = {STOKE_COORDINATOR_BINARY,
                                   "--address",
                                   options.address,
                                   "--data-dir",
                                   options.data_dir,
                                   "--local-workers",
                                   options.local_workers,
                                   "--metrics-address",
                                   "127.0.0.1:0"};
  // Tests run side by side on one host: each coordinator's rendezvous ports of its own.
  const int first_port = 30000 + (getpid() % 300) * 100;
  args.push_back("--rendezvous-ports");
  args.push_back(std::to_string(first_port) + "-" + std::to_string(first_port + 99));
  args.push_back("--min-checkpoint-seconds");
  args.push_back(std::to_string(options.min_checkpoint_seconds));
  for (const auto& a : options.extra_args) args.push_back(a);
  if (options.stop_workers_on_exit) args.push_back("--stop-workers-on-exit");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const std::string log = options.data_dir + "/coordinator.log";
  pid_t pid = fork();
  if (pid == 0) {
    int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    dup2(fd, STDOUT_FILENO);
    dup2(fd, STDERR_FILENO);
    if (options.max_open_files > 0) {
      const rlimit limit{static_cast<rlim_t>(options.max_open_files),
                         static_cast<rlim_t>(options.max_open_files)};
      setrlimit(RLIMIT_NOFILE, &limit);
    }
    execv(argv[0], argv.data());
    _exit(127);
  }
  process->pid_ = pid;
  // The coordinator renames the file into place whole; read until it says something.
  if (!WaitFor(
          [&] {
            std::ifstream in(address_file);
            return static_cast<bool>(in >> process->address_) && !process->address_.empty();
          },
          std::chrono::seconds(60))) {
    ADD_FAILURE() << "the coordinator did not start; its log:\n" << process->Log();
    return nullptr;
  }
  client::ClientOptions client_options;
  client_options.address = process->address_;
  client_options.token = options.client_token;
  client_options.tls_ca = options.client_tls_ca;
  auto client = client::Client::Connect(client_options);
  if (!client.ok()) {
    ADD_FAILURE() << client.status();
    return nullptr;
  }
  process->client_ = *std::move(client);
  int expected = 0;
  if (options.local_workers.rfind("cpu:", 0) == 0)
    expected = std::stoi(options.local_workers.substr(4));
  // Without local workers, being reachable is enough.
  bool attached = WaitFor(
      [&] {
        auto cluster = process->client_->GetCluster();
        if (!cluster.ok()) return false;
        int local = 0;
        for (const auto& w : cluster->workers()) local += w.local() ? 1 : 0;
        return local >= expected;
      },
      std::chrono::seconds(60));
  if (!attached) {
    ADD_FAILURE() << "the local workers did not attach; coordinator log:\n" << process->Log();
    return nullptr;
  }
  return process;
}

CoordinatorProcess::~CoordinatorProcess() {
  if (pid_ > 0) Stop();
}

void CoordinatorProcess::Kill() {
  if (pid_ <= 0) return;
  kill(pid_, SIGKILL);
  waitpid(pid_, nullptr, 0);
  pid_ = -1;
}

int CoordinatorProcess::Stop() {
  if (pid_ <= 0) return -1;
  kill(pid_, SIGTERM);
  int status = 0;
  for (int i = 0; i < 300; ++i) {
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ADD_FAILURE() << "the coordinator did not stop within 30 s of SIGTERM";
  Kill();
  return -1;
}

namespace {

std::vector<std::string> WorkerArgs(const std::string& coordinator, const std::string& id,
                                    const std::vector<std::string>& extra) {
  std::vector<std::string> args = {STOKE_WORKER_BINARY,
                                   "--coordinator",
                                   coordinator,
                                   "--device",
                                   "cpu",
                                   "--id",
                                   id,
                                   "--threads",
                                   "1"};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

}  // namespace

WorkerProcess::WorkerProcess(const std::string& coordinator, const std::string& id,
                             const std::string& log, int cpu,
                             const std::vector<std::string>& extra_args)
    : process_(WorkerArgs(coordinator, id, extra_args), {log, cpu}) {}

void WorkerProcess::Kill(int signal) {
  process_.Signal(signal);
  process_.Wait();
}

std::string CoordinatorProcess::Log() const {
  std::ifstream in(options_.data_dir + "/coordinator.log");
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

}  // namespace stoke::testing
