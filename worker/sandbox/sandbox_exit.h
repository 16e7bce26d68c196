// How stoke-sandbox ends: the exit statuses the worker reads, and the one line on stderr
// that says why when the sandbox itself (not the user's program) ended the attempt.
//
// stoke-sandbox exits with
//   - PROGRAM's exit status; when a signal ended PROGRAM, stoke-sandbox ends by the same
//     signal (without a core dump of its own), so that the worker can name it;
//   - kSandboxSetupFailed (126): the sandbox could not be built (a bind, the cgroup's
//     limits, the change of user, a bad flag); the worker already reads 126 as "cannot set
//     up the training process";
//   - kSandboxProgramNotRun (127): PROGRAM could not be executed (not found inside);
//   - kSandboxOutOfMemory (251): the kernel's OOM killer fired in the attempt's cgroup,
//     whatever PROGRAM's own status was (a killed DataLoader worker counts too).
// Each of the last three comes with one line on stderr, "stoke-sandbox: ...".
#pragma once

#include <unistd.h>

#include <string>
#include <string_view>

namespace stoke::sandbox {

inline constexpr int kSandboxSetupFailed = 126;
inline constexpr int kSandboxProgramNotRun = 127;
inline constexpr int kSandboxOutOfMemory = 251;

// One line on stderr, in one write() so that lines of concurrent processes never mix.
inline void SayLine(std::string_view text) {
  std::string line = "stoke-sandbox: ";
  line.append(text);
  line.push_back('\n');
  ssize_t unused = write(STDERR_FILENO, line.data(), line.size());
  (void)unused;
}

// Says why and exits, without running atexit handlers (also safe in a forked child).
[[noreturn]] inline void ExitSaying(int code, std::string_view text) {
  SayLine(text);
  _exit(code);
}

}  // namespace stoke::sandbox
