// Runs one rank of a script job: the user's own program (command.argv), started as
// torchrun starts a rank, so that a script written for torchrun runs unchanged. Its
// environment carries RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR and
// MASTER_PORT of the gang, CUDA_VISIBLE_DEVICES of this worker's device, STOKE_JOB_ID and
// STOKE_CHECKPOINT_DIR (the job's, kept across attempts), on top of the short allow-list
// every child of the worker gets (child_process.h): never the worker's credentials.
//
// Its output is the job's log, line by line. Descriptor 3 (STOKE_REPORT_FD) is a local
// socket: the Python SDK's stoke.report() writes "key=value ..." lines to it from a
// thread of its own, and the worker writes "stop" to it when the job is cancelled, which
// stoke.should_stop() then answers. The worker turns reports into metric samples, one a
// second at most: the loss averaged over the reports since the last, every other scalar
// at its latest value.
//
// Cancel: "stop" at once, SIGTERM to the program's process group halfway through
// command.grace_seconds, SIGKILL at their end. The exit status decides the outcome.
#pragma once

#include <atomic>
#include <chrono>
#include <optional>
#include <string>

#include "stoke/v1/worker_link.pb.h"
#include "worker/common/task.h"
#include "worker/link/child_process.h"
#include "worker/link/job_users.h"
#include "worker/link/sandbox_command.h"

namespace stoke::worker {

struct ScriptOptions {
  // CUDA_VISIBLE_DEVICES for the program: this worker's device; "" on a CPU worker, which
  // hides every GPU of the host from the program.
  std::string visible_devices;
  // The interpreter for "python" in argv when command.python is unset.
  std::string default_python = "python3";
  // A folder holding the SDK's `stoke` package, put on the program's PYTHONPATH ("": none).
  std::string sdk_path;
  std::optional<JobUser> job_user;
  // With a range (--job-users), each owner's code runs as a uid of its own from it, kept
  // in the table at job_users_table; job_user is then set for each task.
  std::optional<UidRange> job_users;
  std::string job_users_table = kDefaultJobUsersTable;
  // When enabled (with a job user), each rank runs in a sandbox of its attempt's own.
  SandboxSettings sandbox;
  // Where the rank's folder goes for a task without a job folder.
  std::string scratch_dir = "/tmp";
  // Metric samples are sent at most this often.
  std::chrono::milliseconds report_interval{1000};
};

// Runs the assignment's command to its end and relays its output and reports to
// `observer`. Never throws.
TrainOutcome RunScript(const ScriptOptions& options, const v1::Assignment& assignment,
                       TrainingObserver& observer, const std::atomic<bool>& cancel);

// The metric samples of a script's reports: Add each line as it comes, Take a sample when
// one is due. Exposed for tests.
class ReportWindow {
 public:
  ReportWindow(int world_size, std::chrono::steady_clock::time_point started);
  // One line of "key=value" pairs. Returns a note for the job's log when the line had
  // something the worker cannot use (once per problem), else "".
  std::string Add(const std::string& line);
  // A sample of the reports since the last one, if there were any.
  std::optional<MetricSample> Take(std::chrono::steady_clock::time_point now);

 private:
  const int world_size_;
  const std::chrono::steady_clock::time_point started_;
  std::chrono::steady_clock::time_point window_began_;
  MetricSample latest_;  // every field at its latest reported value
  double loss_sum_ = 0;
  int losses_ = 0;
  double samples_ = 0;  // reported `samples` since the window began
  bool pending_ = false;
  // Each problem is said once.
  bool warned_bad_name_ = false;
  bool warned_too_many_ = false;
  bool warned_values_ = false;
};

}  // namespace stoke::worker
