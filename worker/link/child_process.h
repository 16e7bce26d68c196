// What the worker's children share, the training process of a Python or TorchScript model
// (trainer_process.h) and a script job's ranks (script_process.h): both run the user's code,
// so neither may inherit the worker's credentials. A child gets a short allow-list of the
// worker's environment, only the descriptors it is handed (not the coordinator's
// connection), its own process group (it and whatever it starts end together), death with
// the thread that started it, and with a job user, that user's rights alone.
#pragma once

#include <sys/types.h>

#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "stoke/v1/worker_link.pb.h"

namespace stoke::worker {

// An unprivileged account children run as (stoke-worker --job-user), for workers that run
// as root.
struct JobUser {
  std::string name;
  uid_t uid = 0;
  gid_t gid = 0;
  std::string home;
};

// NOT_FOUND naming the user when the system has no such account; INVALID_ARGUMENT for
// root itself.
absl::StatusOr<JobUser> LookUpJobUser(const std::string& name);

// A pipe whose ends lie at descriptors 5 and above, close-on-exec: arranging a child's
// 0 to 4 never overwrites one of them.
struct Pipe {
  int read = -1;
  int write = -1;
  bool Open();
  static void Close(int& fd);
  void CloseBoth();
};

// Moves a descriptor to 5 or above (close-on-exec); -1 when it cannot.
int HighDescriptor(int fd);

// The worker's variables a child keeps (paths, locale, time zone, CUDA, NCCL, torch and
// Triton settings, PYTHONPATH; nothing else: tokens and addresses stay with the worker),
// HOME, USER and LOGNAME of the job user when there is one, then `extra` (NAME=VALUE,
// later ones winning).
std::vector<std::string> ChildEnvironment(const std::optional<JobUser>& user,
                                          const std::vector<std::string>& extra = {});

// Starts `argv` (argv[0] a path) with `env`: descriptor i of the child is fds[i], every
// other descriptor closes; in `workdir` when set; as `user` when set; in a process group
// of its own; killed when the calling thread ends. The child's pid, or -1 with errno set.
pid_t SpawnChild(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                 const std::vector<int>& fds, const std::optional<JobUser>& user,
                 const std::string& workdir = "");

// The file or folder `name` beside the running program (stoke-trainer beside stoke-worker),
// or "" when there is none.
std::string BesideThisProgram(const std::string& name);

// "signal 11 (Segmentation fault)".
std::string SignalName(int signal);

// A child's output as lines for the job's log: a line longer than a log line may be is
// cut, and the last few are kept for a message.
class LineSplitter {
 public:
  template <typename Emit>
  void Append(const char* data, size_t size, Emit emit) {
    partial_.append(data, size);
    size_t start = 0;
    for (size_t newline; (newline = partial_.find('\n', start)) != std::string::npos;
         start = newline + 1) {
      Line(partial_.substr(start, newline - start), emit);
    }
    partial_.erase(0, start);
    if (partial_.size() > kMaxLine) {
      Line(partial_, emit);
      partial_.clear();
    }
  }
  template <typename Emit>
  void Flush(Emit emit) {
    if (!partial_.empty()) Line(partial_, emit);
    partial_.clear();
  }
  // The last few lines, joined by " | ".
  std::string Last() const {
    std::string text;
    for (const auto& line : last_) absl::StrAppend(&text, text.empty() ? "" : " | ", line);
    return text;
  }

 private:
  static constexpr size_t kMaxLine = 4000;
  template <typename Emit>
  void Line(std::string line, Emit emit) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.size() > kMaxLine) line = line.substr(0, kMaxLine) + " [cut]";
    if (!line.empty()) {
      last_.push_back(line);
      if (last_.size() > 3) last_.pop_front();
    }
    emit(line);
  }
  std::string partial_;
  std::deque<std::string> last_;
};

}  // namespace stoke::worker
