// What a job must pass before it is stored, for SubmitJob and ValidateJob alike: the
// spec's rules (spec/job_spec_rules.h), the caller's rights over priority and code, the
// data it names (spec/data_checks.h), and the code sent with it. Every problem of the
// spec is found, not only the first, so that a user fixes them all at once; a refusal of
// the caller (PERMISSION_DENIED) ends the check.
#pragma once

#include <vector>

#include "absl/status/status.h"
#include "server/api/access_control.h"
#include "spec/data_checks.h"
#include "stoke/v1/job_spec.pb.h"

namespace stoke::server {

struct Admission {
  absl::Status refused;                // the caller may not do this (PERMISSION_DENIED)
  std::vector<absl::Status> problems;  // of the spec, each "FIELD: what is wrong"
  v1::JobSpec completed;               // with no problems: what is stored and runs
};

// `code`: model.python's code or a script job's working folder, as sent. With
// `check_code` false (validating a job whose code was not sent), the code is not looked at.
Admission AdmitJob(const Caller& caller, v1::JobSpec spec, const v1::CodeBundle& code,
                   bool check_code, const spec::DataRoots& roots, const AccessControl& access);

}  // namespace stoke::server
