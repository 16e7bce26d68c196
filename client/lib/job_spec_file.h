// Job files: YAML or JSON mapped onto stoke.v1.JobSpec field by field, through the
// message's descriptor, so the file format follows the .proto with no second schema to
// keep in step. Field names are the .proto's (snake_case; lowerCamelCase is accepted as in
// protobuf's JSON mapping); enum values may be written short and in any case
// ("precision: bf16" for PRECISION_BF16). An unknown field, a value of the wrong type or
// two members of one oneof are rejected with the file, line and field path, before
// anything reaches the coordinator.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "stoke/v1/job_spec.pb.h"

namespace stoke::client {

// `source` names the text in error messages (usually the file path).
absl::StatusOr<v1::JobSpec> ParseJobSpec(const std::string& text, const std::string& source);

// The largest job file read: a spec is a few hundred bytes; this leaves room for long
// comments while keeping `stoke submit /dev/zero`-like mistakes harmless.
inline constexpr int64_t kMaxJobFileBytes = 1 << 20;

// The file's text; refuses (naming the file) anything but a regular file, and files over
// kMaxJobFileBytes.
absl::StatusOr<std::string> ReadJobFile(const std::string& path);

// Also makes the data and model paths in the file absolute, relative to the file's own
// folder, so a job file can sit next to its data.
absl::StatusOr<v1::JobSpec> LoadJobSpecFile(const std::string& path);

void ResolveRelativePaths(v1::JobSpec& spec, const std::string& base_dir);

// What travels with the job besides its spec: model.python's code, read from
// model.python.file, or a script job's working folder (command.workdir) when it is a
// folder here; an empty bundle otherwise (a workdir that is not here is taken as a folder
// beneath a data root, which the workers reach).
absl::StatusOr<v1::CodeBundle> ReadJobCode(const v1::JobSpec& spec);

}  // namespace stoke::client
