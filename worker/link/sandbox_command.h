// How the worker runs a user's program in a sandbox: the stoke-sandbox command line for
// one attempt (worker/sandbox/ builds it; --sandbox on turns it on). The child sees the
// system's folders read-only, its job's folder writable, the data roots and the worker's
// own programs read-only, a private /tmp, and nothing else of the host: not the
// coordinator's data dir, the worker's tokens and keys, or other jobs' folders.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "stoke/v1/worker_link.pb.h"
#include "worker/link/child_process.h"

namespace stoke::worker {

struct SandboxSettings {
  std::string program;                 // stoke-sandbox; "": children run without one
  uint64_t memory_bytes = 0;           // each attempt's memory limit (0: none)
  uint64_t pids = 0;                   // each attempt's processes and threads (0: none)
  std::vector<std::string> read_only;  // more folders children read (the worker's programs)
  std::vector<std::string> hidden;     // files children never see, even inside those
  bool enabled() const { return !program.empty(); }
};

// An attempt's memory limit when none is given: the host's memory shared among its GPUs
// (one attempt each), or half of it on a CPU worker (two of which run by default).
uint64_t DefaultJobMemory(bool cuda_worker);

// `argv` run as `user` in the attempt's sandbox (none: the worker's own uid, in a user
// namespace, for a worker that is not root): `job_folder` writable (the job's folder,
// or the task's scratch folder), the assignment's data roots readable and `extra_readable`
// too (a script's virtual environment), from `workdir` ("": the sandbox's default).
std::vector<std::string> SandboxedCommand(const SandboxSettings& settings,
                                          const std::optional<JobUser>& user,
                                          const v1::Assignment& assignment,
                                          const std::string& job_folder,
                                          const std::vector<std::string>& extra_readable,
                                          const std::string& workdir,
                                          const std::vector<std::string>& argv);

}  // namespace stoke::worker
