// Job files: YAML or JSON mapped onto stoke.v1.JobSpec field by field, through the
// message's descriptor, so the file format follows the .proto with no second schema to
// keep in step. Field names are the .proto's (snake_case; lowerCamelCase is accepted as in
// protobuf's JSON mapping); enum values may be written short and in any case
// ("precision: bf16" for PRECISION_BF16). An unknown field, a value of the wrong type or
// two members of one oneof are problems with the file, line, column and field path; every
// one is found, not only the first. This is the one grammar of job files: the CLI reads
// them with it, and the coordinator does for ValidateJob (the Python SDK's way in).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "stoke/v1/job_spec.pb.h"

namespace stoke::spec {

// One thing wrong with a job file: the field (empty for the file as a whole), what is
// wrong, and where (1-based; 0 when unknown).
struct JobFileProblem {
  std::string field;
  std::string message;
  int line = 0;
  int column = 0;
};

struct JobFilePosition {
  int line = 0;  // 1-based; 0: not in the file
  int column = 0;
};

struct ParsedJobFile {
  std::string source;
  v1::JobSpec spec;  // every field that could be read
  std::vector<JobFileProblem> problems;
  std::map<std::string, JobFilePosition> positions;  // "training.steps", "model.mlp.hidden[0]"

  // Where a problem of `field` points: the field, else the nearest section above it that
  // the file holds ("training" for a missing training.steps); {0, 0} if none.
  JobFilePosition PositionOf(std::string field) const;
};

// Reads a job file's text. `source` names it in messages (usually the file path).
ParsedJobFile ParseJobFile(const std::string& text, const std::string& source);

// "job.yaml:4:3: training.steps: must be at least 1".
std::string DescribeProblem(const std::string& source, const JobFileProblem& problem);

// A rule's status ("training.steps: must be at least 1") as a problem of that field.
JobFileProblem ProblemOfStatus(const absl::Status& status);

// The spec, or INVALID_ARGUMENT with every problem, a line each (DescribeProblem).
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

}  // namespace stoke::spec
