// A real stoke-coordinator process (with its local CPU workers) on a loopback port and a
// temp data dir, for end-to-end tests, plus a client connected to it.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "client/lib/client.h"
#include "tests/support/subprocess.h"

namespace stoke::testing {

class CoordinatorProcess {
 public:
  struct Options {
    std::string data_dir;
    // Port 0 picks a free one; a fixed port lets remote workers find a restarted coordinator.
    std::string address = "127.0.0.1:0";
    std::string local_workers = "cpu:2";
    std::vector<std::string> extra_args = {"--heartbeat-timeout", "6"};
    // Stop the local workers with the coordinator (--stop-workers-on-exit), so that a test
    // leaves no process behind. False: they train on through its restart, as by default.
    bool stop_workers_on_exit = true;
    // --min-checkpoint-seconds: none by default, as tests check checkpoints at step
    // intervals of jobs that run for seconds.
    int min_checkpoint_seconds = 0;
    // > 0: the process may open at most this many files (soft and hard limit).
    int max_open_files = 0;
    // The test's own client: the token it sends and the CA it verifies TLS with.
    std::string client_token{};
    std::string client_tls_ca{};
  };

  // Starts it and waits until it listens and every local worker has attached. Fails the
  // calling test (and returns null) if that does not happen within a minute.
  static std::unique_ptr<CoordinatorProcess> Start(const Options& options);
  ~CoordinatorProcess();

  // SIGKILL, and waits for it to be gone (as a crash would leave things).
  void Kill();
  // SIGTERM, and waits for a clean exit; returns its exit code.
  int Stop();

  client::Client& client() { return *client_; }
  const std::string& address() const { return address_; }
  pid_t pid() const { return pid_; }
  // The coordinator's own log, for failure messages.
  std::string Log() const;

 private:
  CoordinatorProcess() = default;

  Options options_;
  pid_t pid_ = -1;
  std::string address_;
  std::unique_ptr<client::Client> client_;
};

// True while a process with this pid exists (and is not a zombie of ours).
bool ProcessAlive(pid_t pid);

// A stoke-worker started by the test (as on a remote host), stopped when destroyed.
class WorkerProcess {
 public:
  // `cpu` >= 0: the worker runs on that core only.
  WorkerProcess(const std::string& coordinator, const std::string& id, const std::string& log,
                int cpu = -1, const std::vector<std::string>& extra_args = {});
  // Sends `signal` and waits for it to end.
  void Kill(int signal);
  pid_t pid() const { return process_.pid(); }

 private:
  BackgroundProcess process_;
};

}  // namespace stoke::testing
