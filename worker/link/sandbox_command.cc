#include "worker/link/sandbox_command.h"

#include <unistd.h>

#include <algorithm>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "files/posix_files.h"

namespace stoke::worker {

uint64_t DefaultJobMemory(bool cuda_worker) {
  std::ifstream meminfo("/proc/meminfo");
  std::string name;
  uint64_t kib = 0;
  while (meminfo >> name >> kib && name != "MemTotal:") meminfo.ignore(256, '\n');
  int gpus = 0;
  for (const std::string& entry : files::ListDirectory("/dev")) {
    if (entry.size() > 6 && entry.rfind("nvidia", 0) == 0 &&
        entry.find_first_not_of("0123456789", 6) == std::string::npos) {
      ++gpus;
    }
  }
  const uint64_t share = cuda_worker ? std::max(1, gpus) : 2;
  return kib * 1024 / share;
}

std::vector<std::string> SandboxedCommand(const SandboxSettings& settings,
                                          const std::optional<JobUser>& user,
                                          const v1::Assignment& a, const std::string& job_folder,
                                          const std::vector<std::string>& extra_readable,
                                          const std::string& workdir,
                                          const std::vector<std::string>& argv) {
  std::vector<std::string> command = {settings.program};
  const auto add = [&command](const char* flag, const std::string& path) {
    command.push_back(flag);
    command.push_back(path);
  };
  if (user) {
    add("--uid", absl::StrCat(user->uid));
    add("--gid", absl::StrCat(user->gid));
  }
  add("--rw", job_folder);
  for (const std::string& path : extra_readable) {
    if (files::Exists(path)) add("--ro", path);
  }
  for (const std::string& root : a.data_roots()) {
    if (files::Exists(root)) add("--ro", root);
  }
  for (const std::string& path : settings.read_only) {
    if (files::Exists(path)) add("--ro", path);
  }
  for (const std::string& path : settings.hidden) add("--hide", path);
  if (!workdir.empty()) add("--workdir", workdir);
  // One group per rank of each attempt on this host; the worker's pid keeps two workers
  // of one host (or a restarted one) from sharing a name.
  add("--cgroup", absl::StrCat("job-", a.job_id(), "-attempt-", a.attempt(), "-rank-", a.rank(),
                               "-worker-", getpid()));
  if (settings.memory_bytes > 0) add("--memory", absl::StrCat(settings.memory_bytes));
  if (settings.pids > 0) add("--pids", absl::StrCat(settings.pids));
  command.push_back("--");
  command.insert(command.end(), argv.begin(), argv.end());
  return command;
}

}  // namespace stoke::worker
