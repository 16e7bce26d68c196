// Trains one rank of a task whose model is the user's code (Python and TorchScript
// models) in a child process, stoke-trainer: a crash, an abort or a hang in that code
// ends the child, the attempt fails naming the signal and the step, and the worker serves
// on. The child gets the assignment, and the code written into the attempt's folder, but
// none of the worker's credentials: its environment is a short allow-list, its only
// descriptors are its standard input (commands), output and error (the job's log), the
// event pipe and the progress page, and with a job user it runs as that user.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "stoke/v1/worker_link.pb.h"
#include "worker/common/task.h"
#include "worker/link/child_process.h"
#include "worker/link/job_users.h"
#include "worker/link/sandbox_command.h"

namespace stoke::worker {

struct TrainerProcessOptions {
  std::string trainer_path;  // the stoke-trainer program
  std::string device;        // its --device: "cpu:0", "cuda:1"
  int threads = 0;           // its --threads; 0: every core
  std::optional<JobUser> job_user;
  // With a range (--job-users), each owner's code runs as a uid of its own from it, kept
  // in the table at job_users_table; job_user is then set for each task.
  std::optional<UidRange> job_users;
  std::string job_users_table = kDefaultJobUsersTable;
  // When enabled (with a job user), each trainer runs in a sandbox of its task's own.
  SandboxSettings sandbox;
  // Where the code of a task without a job folder goes (stoke-bench's in-process runs).
  std::string scratch_dir = "/tmp";
  // After a cancel, the child has this long to stop at a step boundary before it is killed.
  std::chrono::milliseconds cancel_grace{10'000};
};

// The program beside the running one (stoke-trainer beside stoke-worker), or "" when
// there is none.
std::string TrainerBesideThisProgram();

// Runs the assignment in a new stoke-trainer and relays what it reports to `observer`
// (from this thread only) until it ends. A cancel or a preemption in `stops` is passed on as
// a command; a child that has not stopped cancel_grace after a cancel is killed. Never throws.
TrainOutcome TrainInChildProcess(const TrainerProcessOptions& options,
                                 const v1::Assignment& assignment, TrainingObserver& observer,
                                 const TaskStops& stops);

struct TrainerChild;

// The worker's trainers, each started ahead of its task when `ahead`: a trainer's start
// on a GPU (its interpreter importing torch and torch.compile's modules, its device's
// context) takes seconds, so the next one starts as soon as the last one's task has ended,
// and waits, ready, for a task. One trainer at a time, so that an idle one never holds
// device memory beside a busy one. Without `ahead` (CPU workers, where a trainer starts in
// about a second), each task starts its own.
class SpareTrainer {
 public:
  // Starts the first spare when `ahead`.
  SpareTrainer(TrainerProcessOptions options, bool ahead);
  // Kills the spare.
  ~SpareTrainer();
  SpareTrainer(const SpareTrainer&) = delete;
  SpareTrainer& operator=(const SpareTrainer&) = delete;

  // TrainInChildProcess in the spare (waiting for it to be started if need be).
  TrainOutcome Train(const v1::Assignment& assignment, TrainingObserver& observer,
                     const TaskStops& stops);

 private:
  void Launch();

  const TrainerProcessOptions options_;
  const bool ahead_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::unique_ptr<TrainerChild> spare_;  // guarded by mu_
  bool wanted_;                          // a spare should be started
  bool stopping_ = false;
  absl::Status failure_;  // the last start's, when it failed
  std::thread launcher_;  // last: it starts with the members above in place
};

}  // namespace stoke::worker
