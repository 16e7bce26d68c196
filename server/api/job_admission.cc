#include "server/api/job_admission.h"

#include <sys/stat.h>

#include <algorithm>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "spec/code_bundle.h"
#include "spec/job_spec_rules.h"

namespace stoke::server {
namespace {

// A script job's working folder: sent with the job (recorded by its digest), or a folder
// beneath a data root that the workers reach at the same path, or none (the program runs
// in the attempt's own folder).
absl::Status CheckWorkdir(const v1::CodeBundle& code, const spec::DataRoots& roots,
                          v1::CommandSpec& command) {
  command.clear_code_sha256();
  command.clear_code_bytes();
  if (code.files_size() > 0) return spec::RecordWorkdir(code, command);
  if (command.workdir().empty()) return absl::OkStatus();
  auto folder = roots.Resolve("command.workdir", command.workdir());
  if (!folder.ok()) return folder.status();
  struct stat st;
  if (stat(folder->c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat("command.workdir: ", command.workdir(), ": not a folder"));
  }
  command.set_workdir(*folder);
  return absl::OkStatus();
}

bool AnyAbout(const std::vector<absl::Status>& problems, const char* section) {
  return std::any_of(problems.begin(), problems.end(),
                     [&](const absl::Status& s) { return absl::StartsWith(s.message(), section); });
}

// A refusal of the caller ends the check; anything else is a problem of the spec.
bool Note(absl::Status status, Admission& admission) {
  if (status.ok()) return true;
  if (status.code() == absl::StatusCode::kInvalidArgument) {
    admission.problems.push_back(std::move(status));
    return true;
  }
  admission.refused = std::move(status);
  return false;
}

// A script job: the caller's right to run code, its working folder, its defaults.
void AdmitCommand(const Caller& caller, v1::JobSpec& spec, const v1::CodeBundle& code,
                  bool check_code, const spec::DataRoots& roots, const AccessControl& access,
                  Admission& admission) {
  if (!Note(access.RequirePythonModels(caller, "command (a script job)"), admission)) return;
  if (check_code || code.files_size() > 0) {
    Note(CheckWorkdir(code, roots, *spec.mutable_command()), admission);
  }
  if (admission.problems.empty()) spec::ApplyCommandDefaults(spec);
}

// A job of Stoke's loop: the model's code, then the data, then the model with the data.
void AdmitTraining(const Caller& caller, v1::JobSpec& spec, const v1::CodeBundle& code,
                   bool check_code, const spec::DataRoots& roots, const AccessControl& access,
                   bool paths_resolved, Admission& admission) {
  if (spec.model().has_python()) {
    if (!Note(access.RequirePythonModels(caller, "model.python"), admission)) return;
    if (check_code || code.files_size() > 0) {
      Note(spec::RecordCode(code, *spec.mutable_model()->mutable_python()), admission);
    }
  } else if (spec.model().has_torchscript()) {
    // A scripted module is code too: its TorchScript runs in the training process.
    if (!Note(access.RequirePythonModels(caller, "model.torchscript"), admission)) return;
    if (code.files_size() > 0) {
      Note(absl::InvalidArgumentError(
               "code: sent with a job that is neither model.python nor a command"),
           admission);
    }
  } else if (code.files_size() > 0) {
    Note(absl::InvalidArgumentError(
             "code: sent with a job that is neither model.python nor a command"),
         admission);
  }
  // The data's files are read only for a data section that passed its rules.
  if (!paths_resolved || AnyAbout(admission.problems, "data")) return;
  auto data = spec::InspectData(spec, roots);
  if (!data.ok()) {
    Note(data.status(), admission);
    return;
  }
  // The model is held against the data only once the rest is sound.
  if (!admission.problems.empty()) return;
  for (absl::Status& s : spec::CheckAgainstData(spec, *data)) Note(std::move(s), admission);
  if (admission.problems.empty()) spec::ApplyJobSpecDefaults(spec, *data);
}

}  // namespace

Admission AdmitJob(const Caller& caller, v1::JobSpec spec, const v1::CodeBundle& code,
                   bool check_code, const spec::DataRoots& roots, const AccessControl& access) {
  Admission admission;
  admission.problems = spec::CheckJobSpec(spec);
  if (!Note(access.RequirePriorityAllowed(caller, spec.resources()), admission)) return admission;
  const absl::Status resolved = spec::ResolveDataRootPaths(spec, roots);
  Note(resolved, admission);
  if (spec.has_command()) {
    AdmitCommand(caller, spec, code, check_code, roots, access, admission);
  } else {
    AdmitTraining(caller, spec, code, check_code, roots, access, resolved.ok(), admission);
  }
  if (admission.refused.ok() && admission.problems.empty()) admission.completed = std::move(spec);
  return admission;
}

}  // namespace stoke::server
