// The attempt's cgroup: what bounds its memory, process count and CPU share, and the list
// of every process it started, so that none is left behind when it ends.
//
// cgroup v2 (the unified hierarchy, as on systemd hosts such as Ubuntu 24.04): one group,
// <root>/<parent>/<name>, with the controllers it needs enabled in the parent's
// cgroup.subtree_control; memory.max (with memory.swap.max 0 and memory.oom.group 1, so
// that an OOM kill ends the whole attempt rather than one of its processes), pids.max,
// cpu.weight; OOM kills read from memory.events.
// cgroup v1 (one hierarchy per controller): the same group in each of the memory, pids
// and cpu hierarchies; memory.limit_in_bytes (and memory.memsw.limit_in_bytes, so that
// swap does not stretch the limit), pids.max, cpu.shares (weight 100 = 1024 shares); OOM
// kills read from memory.oom_control's oom_kill line (Linux 4.13), else memory.failcnt.
// A controller found in the unified hierarchy is taken there, otherwise from v1 (hybrid
// hosts mount an empty unified hierarchy beside the v1 ones).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace stoke::sandbox {

struct CgroupLimits {
  uint64_t memory_bytes = 0;  // 0: no limit
  uint64_t pids = 0;          // 0: no limit
  uint32_t cpu_weight = 0;    // 0: the default share
};

class AttemptCgroup {
 public:
  // Creates <root>/<parent>/<name> (the parent as needed, and a leftover of the same name
  // is reused) in each hierarchy that holds a controller the attempt needs, and writes the
  // limits. What cannot be had on this host (no writable hierarchy, a controller missing)
  // goes to `notes`, one line each, and the attempt goes on without it: then empty() may be
  // true. Returns false, with `error`, only when a limit the host supports is refused.
  bool Create(const std::string& parent, const std::string& name, const CgroupLimits& limits,
              std::vector<std::string>* notes, std::string* error);
  bool empty() const { return groups_.empty(); }

  // Moves the calling process into every group: done by the attempt's first process
  // before it starts anything, so that all it starts is counted and bounded.
  bool Join(std::string* error) const;
  // SIGKILLs every process still in the groups, again until they are empty or `bound`
  // has passed (then false).
  bool KillAllAndWaitEmpty(std::chrono::milliseconds bound) const;
  // Whether the kernel's OOM killer fired in the group. `exit_code` (128 + 9 for SIGKILL)
  // decides only on v1 kernels older than 4.13, which do not count OOM kills.
  bool OutOfMemory(int exit_code) const;
  // Removes the attempt's groups (the parent stays: other attempts share it); false, with
  // `error`, when one could not be removed within a moment.
  bool Remove(std::string* error) const;

 private:
  struct Group {
    std::string dir;
    bool v2 = false;
    std::vector<std::string> controllers;  // of memory, pids and cpu, those it holds
  };
  const Group* WithController(const std::string& controller) const;
  bool WriteMemoryLimit(std::vector<std::string>* notes, std::string* error) const;
  bool WriteCountLimits(std::vector<std::string>* notes, std::string* error) const;

  std::vector<Group> groups_;
  CgroupLimits limits_;
};

}  // namespace stoke::sandbox
