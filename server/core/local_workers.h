// Launches and supervises this host's stoke-worker processes (--local-workers): one per
// GPU, or a number of CPU workers. A worker that exits is started again after a backoff.
// Workers outlive the coordinator: each runs in a session of its own (a terminal's Ctrl-C
// or the coordinator's death does not reach it) and is recorded in a pid file, so that the
// next coordinator on the same data dir finds the workers still running, supervises them
// in turn, and starts none twice on one device. Stop() ends them; Leave() leaves them
// training while the coordinator goes away.
#pragma once

#include <sys/types.h>

#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace stoke::server {

struct LocalWorkerSpec {
  std::string device;  // "cpu:0", "cuda:1"
  int threads = 0;     // intra-op threads for CPU workers; 0 leaves LibTorch's default
};

// Parses --local-workers (auto | N | cpu:N | 0) against the GPUs the worker binary sees.
absl::StatusOr<std::vector<LocalWorkerSpec>> PlanLocalWorkers(const std::string& flag,
                                                              const std::string& worker_binary);

class LocalWorkerSupervisor {
 public:
  struct Options {
    std::string worker_binary;
    std::string coordinator_address;
    std::vector<LocalWorkerSpec> workers;
    // Each worker's stdout and stderr go to <log_dir>/worker-<n>.log.
    std::string log_dir;
    // Where worker-<n>.pid files record the running workers (pid, start time, device).
    std::string state_dir;
    // Passed on as --coordinator-address-file: where a restarted coordinator writes its
    // address, for workers started by an earlier one.
    std::string address_file;
    // Passed on as --join-token-file and --tls-ca when set.
    std::string join_token_file;
    std::string tls_ca;
    // More flags for every local worker, as they are (--job-users RANGE ...).
    std::vector<std::string> worker_flags;
    absl::Duration min_restart_delay = absl::Seconds(1);
    absl::Duration max_restart_delay = absl::Seconds(30);
  };

  static absl::StatusOr<std::unique_ptr<LocalWorkerSupervisor>> Create(Options options);
  ~LocalWorkerSupervisor();

  // Adopts the workers an earlier coordinator left running, then starts the missing ones.
  absl::Status Start();
  // SIGTERM to every worker, SIGKILL to those still alive after `grace`.
  void Stop(absl::Duration grace = absl::Seconds(5));
  // Stops supervising and leaves the workers running, for the next coordinator.
  void Leave();
  // The workers running now, adopted ones included.
  size_t Running();

  // Stops the workers a coordinator left running on `state_dir` (stoke-coordinator
  // --stop-workers): SIGTERM, SIGKILL after `grace`. Returns how many there were.
  static size_t StopLeftWorkers(const std::string& state_dir, absl::Duration grace);

 private:
  struct Child {
    pid_t pid = -1;
    bool adopted = false;   // started by an earlier coordinator: not ours to waitpid
    absl::Time next_start;  // when to (re)start it if not running
    absl::Duration delay;   // current backoff
    absl::Time started;
  };

  explicit LocalWorkerSupervisor(Options options) : options_(std::move(options)) {}
  void Monitor();
  pid_t Spawn(size_t index);
  void TerminateChildren(absl::Duration grace);
  std::string PidFile(size_t index) const;

  const Options options_;
  std::vector<Child> children_;  // touched by the monitor thread only, until Stop
  std::thread monitor_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  bool terminate_ = true;  // on stopping: end the workers (Stop) or leave them (Leave)
  absl::Duration grace_;
};

}  // namespace stoke::server
