// What a valid JobSpec is, and the defaults that complete one. Every rule names the field
// it is about ("training.batch_size: ..."), so that a user reading the error knows which
// line of their job file to fix. Applied to every submission before anything is stored:
// ValidateJobSpec (the spec alone), then InspectData (data_checks.h: its files), then
// ValidateAgainstData and ApplyJobSpecDefaults (the spec with what the data holds).
#pragma once

#include "absl/status/status.h"
#include "server/api/data_checks.h"
#include "stoke/v1/job_spec.pb.h"

namespace stoke::server {

// INVALID_ARGUMENT naming the first offending field, or OK. A script job (command) is
// checked for its program, and for naming none of what only Stoke's loop reads.
absl::Status ValidateJobSpec(const v1::JobSpec& spec);

// The model can take this data, and a batch fits in it.
absl::Status ValidateAgainstData(const v1::JobSpec& spec, const DataFacts& data);

// Fills every field left at "use the default" with the value that will be used, so the
// stored spec says exactly what ran. Expects a spec that passed both checks.
void ApplyJobSpecDefaults(v1::JobSpec& spec, const DataFacts& data);

// The defaults of a script job (command): its grace, devices and restarts.
void ApplyCommandDefaults(v1::JobSpec& spec);

}  // namespace stoke::server
