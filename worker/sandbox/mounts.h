// The sandbox's file system: a fresh root that holds the system's folders read-only, the
// job's binds and nothing else of the host (no tokens, keys, store or data folders unless
// bound), built in a mount namespace of its own.
#pragma once

#include <string>
#include <vector>

namespace stoke::sandbox {

struct MountPlan {
  std::vector<std::string> read_only;   // bound read-only at the same path inside
  std::vector<std::string> read_write;  // bound read-write at the same path inside
  std::vector<std::string> hidden;      // emptied inside (missing ones are left out)
};

// Gives the calling process a mount namespace of its own, builds the root in it and
// pivots into it; the host's root is gone from this process's view afterwards. The caller
// must be root (CAP_SYS_ADMIN) and the first process of a new pid namespace (the fresh
// /proc is that namespace's). On failure returns false with one line naming what failed
// and why ("cannot bind /data/x read-only: No such file or directory").
//
// Inside:
//   /usr /bin /sbin /lib /lib32 /lib64 /libx32 /etc /opt   read-only binds of the host's
//       (those that exist; a symlink such as /bin -> usr/bin is recreated as a symlink)
//   /dev       the host's /dev (GPU device nodes), with a private tmpfs on /dev/shm and
//              the new IPC namespace's own /dev/mqueue
//   /proc      a fresh procfs of the new pid namespace
//   /sys       the host's, read-only (its submounts too)
//   /tmp       a private tmpfs, mode 1777
//   then the --ro and --rw binds in path order (a --rw under a --ro stays writable),
//   then the --hide overmounts (an empty read-only tmpfs, or /dev/null over a file);
//   the root itself is a read-only tmpfs.
bool EnterSandboxRoot(const MountPlan& plan, std::string* error);

}  // namespace stoke::sandbox
