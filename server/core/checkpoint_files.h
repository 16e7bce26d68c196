// The coordinator's view of a job's checkpoints: the step-<n> directories the worker
// writes under <jobs_dir>/<id>/checkpoints (see worker/engine/checkpoint.h). A directory
// counts once its state.pt exists, which the worker writes last. Read-only here.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/time/time.h"

namespace stoke::server {

struct CheckpointFiles {
  uint64_t step = 0;
  std::string path;  // the step-<n> directory
  uint64_t size_bytes = 0;
  absl::Time write_time;
};

// Complete checkpoints of the job whose files are in `job_dir`, oldest first.
std::vector<CheckpointFiles> ListCheckpointFiles(const std::string& job_dir);

}  // namespace stoke::server
