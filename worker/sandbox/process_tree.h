// The processes of an attempt, and how signals pass between them.
//
//   worker --signal--> stoke-sandbox (outer; the pid the worker holds, in the worker's
//                      process group)
//                        --forwards--> init (pid 1 of the new pid namespace, a process
//                                      group of its own)
//                                        --forwards--> PROGRAM's process group (PROGRAM,
//                                                      pid 2, leads a group of its own)
//
// Each process is in a different process group, so a signal the worker sends to the
// outer's group reaches PROGRAM once, through the chain, never twice. PROGRAM's group is
// what a terminal would signal: PROGRAM and the children it did not move elsewhere
// (DataLoader workers, a shell's commands); one that left the group (setsid) is reached
// only when PROGRAM itself has, by signalling PROGRAM alone. Forwarded: SIGTERM, SIGINT,
// SIGHUP, SIGUSR1, SIGUSR2. Each process of the chain reads signals with sigtimedwait
// (blocked, never handled asynchronously), so none is lost between fork and exec and
// the namespace's init, which the kernel shields from unhandled signals, still gets them.
// When PROGRAM ends, init exits with its status and the kernel kills what is left in the
// namespace; init dies with the outer (PR_SET_PDEATHSIG).
// Without namespaces the outer is a child subreaper: PROGRAM is its child, and whatever
// PROGRAM started is reparented to it and killed when PROGRAM ends.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace stoke::sandbox {

// Blocks the forwarded signals and SIGCHLD in the calling process (its children inherit
// that, up to PROGRAM's exec), and returns the mask it had, for PROGRAM.
sigset_t BlockSignals();

// The user and group PROGRAM runs as (none: the caller's).
struct Credentials {
  std::optional<uid_t> uid;
  std::optional<gid_t> gid;
};

// No supplementary groups, then the group, then the user (all three of real, effective
// and saved), then no_new_privs (no setuid program gives privileges back).
bool DropPrivileges(const Credentials& credentials, std::string* error);

// For a caller without root: after unshare(CLONE_NEWUSER), maps its own uid and gid to
// themselves in the new user namespace (and denies setgroups, as the kernel requires of
// an unprivileged map). Its processes stay that uid, with the namespace's rights over the
// namespaces made with it (mounts, a pid namespace's /proc) and no rights beyond them.
bool MapOwnIdsInNewUserNamespace(uid_t uid, gid_t gid, std::string* error);

// The calling process gets SIGKILL when its parent dies. `parent_alive` is the read end
// of a pipe whose write end only the parent holds: a hang-up means the parent is already
// gone (then this returns false). Set again after DropPrivileges, which clears it.
bool DieWithParent(int parent_alive);

struct ProgramSpec {
  std::vector<std::string> argv;  // argv[0] looked up on PATH when it holds no '/'
  std::string workdir;            // must be entered; empty: try `start_dir`, else "/"
  std::string start_dir;
  sigset_t mask;  // the signal mask stoke-sandbox was started with
};

// In a forked child: a process group of its own, its directory and signal mask, then
// exec. Never returns: 126 (workdir) or 127 (exec) with a line on stderr.
[[noreturn]] void ExecProgram(const ProgramSpec& spec);

// Waits for `child`, passing each forwarded signal on: to the child's process group
// (`to_group`) or to the child alone. With `reap_all` (an init, a subreaper) every other
// child that ends is reaped on the way. Returns the child's wait status.
int WaitForwarding(pid_t child, bool to_group, bool reap_all);

// For a subreaper whose PROGRAM has ended: SIGKILLs every child it has (the orphans of
// PROGRAM's tree are reparented to it, a generation at a time) and reaps them, until none
// is left (true) or `bound` has passed (false).
bool KillDescendants(std::chrono::milliseconds bound);

// A wait status as a shell reports it: the exit status, or 128 + the signal.
int ExitCodeOf(int wait_status);

}  // namespace stoke::sandbox
