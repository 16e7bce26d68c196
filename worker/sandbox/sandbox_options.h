// stoke-sandbox's command line: what to contain, how, and the program to run.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace stoke::sandbox {

struct SandboxOptions {
  std::optional<uid_t> uid;
  std::optional<gid_t> gid;
  std::vector<std::string> read_only;   // --ro, absolute and normalized
  std::vector<std::string> read_write;  // --rw
  std::vector<std::string> hidden;      // --hide
  std::string workdir;                  // empty: the directory stoke-sandbox started in
  uint64_t memory_bytes = 0;            // 0: no limit
  uint64_t pids = 0;                    // 0: no limit
  uint32_t cpu_weight = 0;              // 0: left as it is
  std::string cgroup;                   // empty: no cgroup
  std::string cgroup_parent = "stoke";
  bool namespaces = true;
  bool help = false;
  std::vector<std::string> program;  // PROGRAM and its arguments
};

// Parses argv (argv[0] is stoke-sandbox itself). On a mistake returns false with `error`
// naming the flag ("--memory: not a byte count: 12Q").
bool ParseSandboxOptions(int argc, char** argv, SandboxOptions* options, std::string* error);

// The checks that depend on who runs it: as root, --uid and --gid are required (a user's
// code never runs as root); neither may be 0.
bool CheckSandboxOptions(const SandboxOptions& options, bool as_root, std::string* error);

// The text of --help.
std::string SandboxUsage();

}  // namespace stoke::sandbox
