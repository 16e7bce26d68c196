// Jobs of the user's models run the way a worker runs them, for tests: a job file checked
// and completed by the coordinator's rules, its code read as `stoke submit` reads it, and
// the assignment trained in a real stoke-trainer. Torch-free, so that a test of it never
// meets torch's copy of the protobuf headers.
#pragma once

#include <chrono>
#include <string>

#include "stoke/v1/worker_link.pb.h"
#include "worker/common/task.h"

namespace stoke::testing {

// The assignment a coordinator sends for `yaml`, whose relative paths (model.python.file)
// are taken from `base_dir`; the job's folder is `job_dir`. Fails the calling test (and
// returns an empty assignment) when the job file is refused.
v1::Assignment AssignJob(const std::string& yaml, const std::string& base_dir,
                         const std::string& job_dir);

struct TrainerRun {
  worker::TrainOutcome outcome;
  double seconds = 0;
};

// Trains `assignment` in STOKE_TRAINER_BINARY on `device`, reporting to `observer`; the
// run is cancelled after `cancel_after`, and killed `cancel_grace` later.
TrainerRun TrainInTrainer(const v1::Assignment& assignment, const std::string& device,
                          worker::TrainingObserver& observer,
                          std::chrono::milliseconds cancel_after = std::chrono::hours(1),
                          std::chrono::milliseconds cancel_grace = std::chrono::seconds(2));

}  // namespace stoke::testing
