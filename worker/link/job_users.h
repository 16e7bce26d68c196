// Users of their own for the code of jobs: one unprivileged uid per owner, taken from a
// range the operator gives (stoke-worker --job-users 61000-61999), never the worker's or
// the coordinator's. An owner keeps its uid on a host across attempts, jobs and worker
// restarts (its files stay its own), and two owners never share one, so one owner's code
// cannot read or rewrite another's jobs. The uids need no account in /etc/passwd: the
// kernel checks numbers, and the child gets USER and HOME from the worker.
#pragma once

#include <sys/types.h>

#include <string>

#include "absl/status/statusor.h"
#include "stoke/v1/worker_link.pb.h"
#include "worker/link/child_process.h"

namespace stoke::worker {

struct UidRange {
  uid_t first = 0;
  uid_t last = 0;
};

// "61000-61999": INVALID_ARGUMENT naming --job-users for anything else, for a range that
// includes 0 (root) or is reversed.
absl::StatusOr<UidRange> ParseUidRange(const std::string& text);

// The owner's user on this host, from the table at `table_path` (one "uid<TAB>owner" line
// per owner, escaped), which every worker of the host shares under an exclusive lock; a
// new owner gets the lowest uid of `range` not taken, written before it is returned. The
// group is the uid's number. RESOURCE_EXHAUSTED when the range is used up; INTERNAL when
// the table cannot be read or written.
absl::StatusOr<JobUser> JobUserForOwner(const std::string& table_path, UidRange range,
                                        const std::string& owner);

// The uids a worker running as root gives owners when the operator names none.
inline constexpr const char* kDefaultJobUsers = "61000-61999";

// Where the uids of --job-users go: one table a host (every worker of it shares it).
inline constexpr const char* kDefaultJobUsersTable = "/var/lib/stoke/job-users";

// A task's options with `job_user` set to the user of the assignment's owner when
// `job_users` names a range (the trainer's and the scripts' options alike). The owner's
// job folder is the user's home: the only folder of the host that is the user's own.
template <typename Options>
absl::StatusOr<Options> WithOwnersUser(Options options, const v1::Assignment& assignment) {
  if (!options.job_users) return options;
  auto user = JobUserForOwner(options.job_users_table, *options.job_users, assignment.owner());
  if (!user.ok()) return user.status();
  options.job_user = *user;
  if (!assignment.job_dir().empty()) options.job_user->home = assignment.job_dir();
  return options;
}

}  // namespace stoke::worker
