// The folder an attempt of user code runs in, made by the worker (root, with a job user)
// inside a job folder that the job's own code could write before: by an earlier attempt,
// or by another job of the same owner running now. Nothing there may redirect what root
// does. So every step goes through descriptors opened without following links, each
// relative to the folder opened before it; the rank's folder is made afresh, filled while
// it is still root's, and handed to the user last, files before the folders that hold
// them; and nothing already there is ever handed over by its path.
#pragma once

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "stoke/v1/worker_link.pb.h"
#include "worker/link/child_process.h"

namespace stoke::worker {

struct AttemptFolders {
  std::string base;         // the job folder, or the task's scratch folder (removed after it)
  std::string rank;         // <base>/attempts/<n>/rank-<r>, made afresh
  std::string checkpoints;  // <base>/checkpoints, kept across attempts
};

// The attempt's own folder for this rank, <job>/attempts/<n>/rank-<r> (each rank its own,
// so that ranks sharing the job folder never write the same files), and the job's
// checkpoints folder; beneath a folder of `scratch_dir` for a task without a job folder.
// The assignment's code (if any) is written into the rank folder's code/. With `user`:
// the job folder is the user's alone (0700), and so are these folders. A rank folder left
// by an earlier try of the same attempt is moved aside, not reused; a link or file where
// a folder belongs is moved aside too.
absl::StatusOr<AttemptFolders> PrepareAttemptFolder(const v1::Assignment& assignment,
                                                    const std::string& scratch_dir,
                                                    const std::optional<JobUser>& user);

}  // namespace stoke::worker
