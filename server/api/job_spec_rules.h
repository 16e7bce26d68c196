// What a valid JobSpec is, and the defaults that complete one. Every rule names the field
// it is about ("training.batch_size: ..."), so that a user reading the error knows which
// line of their job file to fix. Applied to every submission before anything is stored.
#pragma once

#include "absl/status/status.h"
#include "stoke/v1/job_spec.pb.h"

namespace stoke::server {

// INVALID_ARGUMENT naming the first offending field, or OK.
absl::Status ValidateJobSpec(const v1::JobSpec& spec);

// Fills every field left at "use the default" with the value that will be used, so the
// stored spec says exactly what ran. Expects a spec that passed ValidateJobSpec.
void ApplyJobSpecDefaults(v1::JobSpec& spec);

}  // namespace stoke::server
