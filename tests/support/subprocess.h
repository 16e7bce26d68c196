// Programs run by tests: to completion with their output captured (the CLI as a user runs
// it), or in the background with their output going to a log file (ranks, workers, a
// Prometheus server). Free of protobuf and torch headers, so any test may include it.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace stoke::testing {

struct CommandResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};

CommandResult RunCommand(const std::vector<std::string>& argv,
                         const std::vector<std::string>& extra_env = {});

// A program started in the background (argv[0] looked up in PATH), its stdout and stderr
// appended to `log`. Killed (SIGKILL) and reaped when destroyed, if it still runs.
class BackgroundProcess {
 public:
  struct Options {
    std::string log;
    int cpu = -1;  // >= 0: runs on that core only
  };
  BackgroundProcess(const std::vector<std::string>& argv, const Options& options);
  ~BackgroundProcess();
  BackgroundProcess(const BackgroundProcess&) = delete;
  BackgroundProcess& operator=(const BackgroundProcess&) = delete;

  pid_t pid() const { return pid_; }
  void Signal(int signal);
  // Waits for it to end: its exit code, or 128 + the signal that ended it.
  int Wait();
  // What it has written so far.
  std::string Log() const;

 private:
  std::string log_;
  pid_t pid_ = -1;
  int exit_code_ = -1;
};

// A loopback port that was free a moment ago.
int FreePort();

}  // namespace stoke::testing
