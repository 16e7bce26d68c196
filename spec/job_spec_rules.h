// What a valid JobSpec is, and the defaults that complete one. Every rule names the field
// it is about ("training.batch_size: ..."), so that a user reading the error knows which
// line of their job file to fix. Applied to every submission before anything is stored:
// ValidateJobSpec (the spec alone), then InspectData (data_checks.h: its files), then
// ValidateAgainstData and ApplyJobSpecDefaults (the spec with what the data holds).
#pragma once

#include <vector>

#include "absl/status/status.h"
#include "spec/data_checks.h"
#include "stoke/v1/job_spec.pb.h"

namespace stoke::spec {

// Every problem of the spec alone, each an INVALID_ARGUMENT status whose message starts
// with the field it is about ("training.steps: must be at least 1"); empty when it is
// valid. A script job (command) is checked for its program, and for naming none of what
// only Stoke's loop reads.
std::vector<absl::Status> CheckJobSpec(const v1::JobSpec& spec);

// Every problem of the spec with the data it names: whether the model can take this data,
// and whether a batch fits in it. Only a model that cannot take the data at all is
// reported alone.
std::vector<absl::Status> CheckAgainstData(const v1::JobSpec& spec, const DataFacts& data);

// OK, the one problem, or INVALID_ARGUMENT with every problem's message, a line each.
absl::Status JoinProblems(const std::vector<absl::Status>& problems);

// CheckJobSpec and CheckAgainstData's problems, joined.
absl::Status ValidateJobSpec(const v1::JobSpec& spec);
absl::Status ValidateAgainstData(const v1::JobSpec& spec, const DataFacts& data);

// Fills every field left at "use the default" with the value that will be used, so the
// stored spec says exactly what ran. Expects a spec that passed both checks.
void ApplyJobSpecDefaults(v1::JobSpec& spec, const DataFacts& data);

// The defaults of a script job (command): its grace, devices and restarts.
void ApplyCommandDefaults(v1::JobSpec& spec);

}  // namespace stoke::spec
