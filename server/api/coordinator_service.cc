#include "server/api/coordinator_service.h"

#include <google/protobuf/descriptor.h>
#include <sys/stat.h>

#include <algorithm>
#include <charconv>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "proto/stoke/v1/limits.h"
#include "server/api/checked_request_handler.h"
#include "server/api/file_stream_reactor.h"
#include "server/api/grpc_status.h"
#include "server/api/job_admission.h"
#include "server/api/model_export.h"
#include "server/api/watch_reactor.h"
#include "server/common/time_util.h"
#include "spec/code_bundle.h"
#include "spec/job_spec_file.h"
#include "spec/job_spec_rules.h"

namespace stoke::server {
namespace {

using v1::kDefaultPageSize;
using v1::kMaxPageSize;

// Whether two fields are one, or one lies within the other ("training", "training.steps").
bool Related(const std::string& a, const std::string& b) {
  auto within = [](const std::string& inner, const std::string& outer) {
    return inner.size() > outer.size() && absl::StartsWith(inner, outer) &&
           (inner[outer.size()] == '.' || inner[outer.size()] == '[');
  };
  return a == b || within(a, b) || within(b, a);
}

// The file's own problems first, then the rules', placed where the file wrote their field.
// A rule's problem about a field the file could not give (its value was in error) only
// repeats that error, and is left out.
void AddProblems(const spec::ParsedJobFile& file, const std::vector<absl::Status>& rules,
                 v1::ValidateJobResponse& response) {
  auto add = [&](const spec::JobFileProblem& p) {
    v1::SpecProblem* out = response.add_problems();
    out->set_field(p.field);
    out->set_message(p.message);
    out->set_line(static_cast<uint32_t>(p.line));
    out->set_column(static_cast<uint32_t>(p.column));
  };
  for (const spec::JobFileProblem& p : file.problems) add(p);
  for (const absl::Status& status : rules) {
    spec::JobFileProblem p = spec::ProblemOfStatus(status);
    const bool repeats =
        std::any_of(file.problems.begin(), file.problems.end(), [&](const spec::JobFileProblem& q) {
          return !q.field.empty() && Related(p.field, q.field);
        });
    if (repeats) continue;
    const spec::JobFilePosition at = file.PositionOf(p.field);
    p.line = at.line;
    p.column = at.column;
    add(p);
  }
}

absl::Status RequireId(const std::string& id) {
  if (id.empty()) return absl::InvalidArgumentError("id: required");
  if (id.size() > v1::kMaxIdBytes) {
    return absl::InvalidArgumentError(absl::StrCat("id: at most ", v1::kMaxIdBytes, " bytes"));
  }
  return absl::OkStatus();
}

}  // namespace

void CoordinatorService::CheckRequestDecoding() {
  const auto* service = google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(
      v1::Coordinator::service_full_name());
  auto install = [&](const char* name, grpc::internal::MethodHandler* handler) {
    MarkMethodCallback(service->FindMethodByName(name)->index(), handler);
  };
  using S = CoordinatorService;
  install("SubmitJob", CheckedUnary(this, &S::SubmitJob));
  install("ValidateJob", CheckedUnary(this, &S::ValidateJob));
  install("GetJob", CheckedUnary(this, &S::GetJob));
  install("ListJobs", CheckedUnary(this, &S::ListJobs));
  install("CancelJob", CheckedUnary(this, &S::CancelJob));
  install("SetJobPriority", CheckedUnary(this, &S::SetJobPriority));
  install("WatchJob", CheckedServerStreaming(this, &S::WatchJob));
  install("GetCluster", CheckedUnary(this, &S::GetCluster));
  install("ListCheckpoints", CheckedUnary(this, &S::ListCheckpoints));
  install("DownloadModel", CheckedServerStreaming(this, &S::DownloadModel));
  install("ListAudit", CheckedUnary(this, &S::ListAudit));
  install("WhoAmI", CheckedUnary(this, &S::WhoAmI));
}

grpc::ServerUnaryReactor* CoordinatorService::Defer(grpc::CallbackServerContext* context,
                                                    std::function<absl::Status(const Caller&)> work,
                                                    Executor* on) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  auto caller = access_.IdentifyUser(*context);
  if (!caller.ok()) {
    reactor->Finish(ToGrpcStatus(caller.status()));
    return reactor;
  }
  (on ? *on : executor_).Post([reactor, caller = *std::move(caller), work = std::move(work)] {
    reactor->Finish(ToGrpcStatus(work(caller)));
  });
  return reactor;
}

absl::StatusOr<v1::Job> CoordinatorService::JobFor(const Caller& caller, const std::string& id) {
  if (auto s = AccessControl::Require(caller, security::Role::kViewer, "reading jobs"); !s.ok()) {
    return s;
  }
  if (auto s = RequireId(id); !s.ok()) return s;
  auto job = core_.GetJob(id);
  if (!job.ok()) return job.status();
  if (AccessControl::Owns(caller, *job)) return job;
  return RedactForNonOwner(*std::move(job));
}

grpc::ServerUnaryReactor* CoordinatorService::SubmitJob(grpc::CallbackServerContext* context,
                                                        const v1::SubmitJobRequest* request,
                                                        v1::SubmitJobResponse* response) {
  return Defer(context, [this, request, response](const Caller& caller) -> absl::Status {
    // A new job's entry is stored with it; any other outcome's is recorded here.
    bool audited = false;
    absl::Status result = Submit(caller, *request, *response, &audited);
    if (!audited) audit_.Record(caller, "SubmitJob", response->job().id(), result);
    return result;
  });
}

absl::Status CoordinatorService::Submit(const Caller& caller, const v1::SubmitJobRequest& request,
                                        v1::SubmitJobResponse& response, bool* audited) {
  if (auto s = AccessControl::Require(caller, security::Role::kSubmitter, "submitting jobs");
      !s.ok()) {
    return s;
  }
  if (!request.has_spec()) return absl::InvalidArgumentError("spec: required");
  if (request.request_id().size() > v1::kMaxIdBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("request_id: at most ", v1::kMaxIdBytes, " bytes"));
  }
  v1::JobSpec spec = request.spec();
  // Fields this coordinator does not know are never stored: they would ride along in
  // every ListJobs answer and every assignment.
  spec.DiscardUnknownFields();
  if (const size_t bytes = spec.ByteSizeLong(); bytes > v1::kMaxSpecBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("spec: ", bytes, " bytes; a job spec may take at most ", v1::kMaxSpecBytes));
  }
  const bool sends_code = request.code().files_size() > 0;
  Admission admission =
      AdmitJob(caller, std::move(spec), request.code(), /*check_code=*/true, data_roots_, access_);
  if (!admission.refused.ok()) {
    const absl::Status& r = admission.refused;
    if (!absl::StartsWith(r.message(), "resources.")) return r;
    return absl::Status(r.code(), absl::StrCat("spec.", r.message()));
  }
  if (!admission.problems.empty()) {
    // Fields are named within the request ("spec.training.steps").
    for (absl::Status& p : admission.problems) {
      p = absl::Status(p.code(), absl::StrCat("spec.", p.message()));
    }
    return spec::JoinProblems(admission.problems);
  }
  spec = std::move(admission.completed);
  const v1::AuditEntry entry = audit_.Entry(caller, "SubmitJob", "", absl::OkStatus());
  auto job = core_.SubmitJob(spec, request.request_id(), access_.enabled() ? caller.name : "",
                             &entry, audited, sends_code ? &request.code() : nullptr);
  if (!job.ok()) return job.status();
  *response.mutable_job() = *std::move(job);
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* CoordinatorService::ValidateJob(grpc::CallbackServerContext* context,
                                                          const v1::ValidateJobRequest* request,
                                                          v1::ValidateJobResponse* response) {
  return Defer(context, [this, request, response](const Caller& caller) -> absl::Status {
    if (auto s = AccessControl::Require(caller, security::Role::kSubmitter, "validating jobs");
        !s.ok()) {
      return s;
    }
    return Validate(caller, *request, *response);
  });
}

absl::Status CoordinatorService::Validate(const Caller& caller,
                                          const v1::ValidateJobRequest& request,
                                          v1::ValidateJobResponse& response) const {
  spec::ParsedJobFile file;
  if (!request.job_file().empty() || !request.job_file_name().empty()) {
    if (request.job_file().size() > static_cast<size_t>(spec::kMaxJobFileBytes)) {
      return absl::InvalidArgumentError(
          absl::StrCat("job_file: at most ", spec::kMaxJobFileBytes, " bytes"));
    }
    if (!request.base_dir().empty() && request.base_dir()[0] != '/') {
      return absl::InvalidArgumentError("base_dir: an absolute folder");
    }
    file = spec::ParseJobFile(request.job_file(), request.job_file_name());
    if (!request.base_dir().empty()) spec::ResolveRelativePaths(file.spec, request.base_dir());
  } else {
    file.spec = request.spec();
  }
  file.spec.DiscardUnknownFields();
  if (const size_t bytes = file.spec.ByteSizeLong(); bytes > v1::kMaxSpecBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("spec: ", bytes, " bytes; a job spec may take at most ", v1::kMaxSpecBytes));
  }
  *response.mutable_spec() = file.spec;
  Admission admission =
      AdmitJob(caller, file.spec, request.code(),
               /*check_code=*/request.code().files_size() > 0, data_roots_, access_);
  if (!admission.refused.ok()) return admission.refused;
  AddProblems(file, admission.problems, response);
  if (response.problems_size() == 0) *response.mutable_completed() = std::move(admission.completed);
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* CoordinatorService::GetJob(grpc::CallbackServerContext* context,
                                                     const v1::GetJobRequest* request,
                                                     v1::Job* response) {
  return Defer(
      context,
      [this, request, response](const Caller& caller) -> absl::Status {
        auto job = JobFor(caller, request->id());
        if (!job.ok()) return job.status();
        *response = *std::move(job);
        return absl::OkStatus();
      },
      &reads_);
}

grpc::ServerUnaryReactor* CoordinatorService::ListJobs(grpc::CallbackServerContext* context,
                                                       const v1::ListJobsRequest* request,
                                                       v1::ListJobsResponse* response) {
  return Defer(
      context,
      [this, request, response](const Caller& caller) -> absl::Status {
        if (auto s = AccessControl::Require(caller, security::Role::kViewer, "listing jobs");
            !s.ok()) {
          return s;
        }
        JobQuery query;
        if (request->owner().size() > v1::kMaxIdBytes) {
          return absl::InvalidArgumentError(
              absl::StrCat("owner: at most ", v1::kMaxIdBytes, " bytes"));
        }
        query.owner = request->owner();
        if (request->states_size() > v1::kMaxRepeatedElements) {
          return absl::InvalidArgumentError(absl::StrCat(
              "states: ", request->states_size(), " entries; at most ", v1::kMaxRepeatedElements));
        }
        for (int state : request->states()) {
          if (!v1::JobState_IsValid(state) || state == v1::JOB_STATE_UNSPECIFIED) {
            return absl::InvalidArgumentError(absl::StrCat("states: unknown job state ", state));
          }
          query.states.push_back(static_cast<v1::JobState>(state));
        }
        query.limit = request->page_size() == 0 ? kDefaultPageSize
                                                : std::min(request->page_size(), kMaxPageSize);
        const std::string& token = request->page_token();
        if (!token.empty()) {
          auto [end, ec] =
              std::from_chars(token.data(), token.data() + token.size(), query.before_id);
          if (ec != std::errc() || end != token.data() + token.size()) {
            return absl::InvalidArgumentError("page_token: not a token returned by ListJobs");
          }
        }
        auto page = core_.ListJobs(query);
        if (!page.ok()) return page.status();
        size_t bytes = 0;
        bool cut = false;
        for (auto& job : page->jobs) {
          // A page stops short of the message limit however large the jobs are; the token
          // leads on from the last job it holds.
          bytes += job.ByteSizeLong();
          if (response->jobs_size() > 0 && bytes > v1::kMaxPageBytes) {
            cut = true;
            break;
          }
          *response->add_jobs() =
              AccessControl::Owns(caller, job) ? std::move(job) : RedactForNonOwner(std::move(job));
        }
        if ((page->more || cut) && response->jobs_size() > 0) {
          response->set_next_page_token(response->jobs(response->jobs_size() - 1).id());
        }
        return absl::OkStatus();
      },
      &reads_);
}

grpc::ServerUnaryReactor* CoordinatorService::CancelJob(grpc::CallbackServerContext* context,
                                                        const v1::CancelJobRequest* request,
                                                        v1::Job* response) {
  return Defer(context, [this, request, response](const Caller& caller) -> absl::Status {
    auto cancel = [&]() -> absl::Status {
      if (auto s = AccessControl::Require(caller, security::Role::kSubmitter, "cancelling jobs");
          !s.ok()) {
        return s;
      }
      if (auto s = RequireId(request->id()); !s.ok()) return s;
      if (request->reason().size() > v1::kMaxReasonBytes) {
        return absl::InvalidArgumentError(
            absl::StrCat("reason: at most ", v1::kMaxReasonBytes, " bytes"));
      }
      auto job = core_.GetJob(request->id());
      if (!job.ok()) return job.status();
      if (auto s = AccessControl::RequireOwner(caller, *job, "cancelling"); !s.ok()) return s;
      auto cancelled = core_.CancelJob(request->id(), request->reason());
      if (!cancelled.ok()) return cancelled.status();
      *response = *std::move(cancelled);
      return absl::OkStatus();
    };
    absl::Status result = cancel();
    audit_.Record(caller, "CancelJob", request->id(), result);
    return result;
  });
}

grpc::ServerUnaryReactor* CoordinatorService::SetJobPriority(
    grpc::CallbackServerContext* context, const v1::SetJobPriorityRequest* request,
    v1::Job* response) {
  return Defer(context, [this, request, response](const Caller& caller) -> absl::Status {
    auto change = [&]() -> absl::Status {
      if (auto s = AccessControl::Require(caller, security::Role::kSubmitter,
                                          "changing a job's priority");
          !s.ok()) {
        return s;
      }
      if (auto s = RequireId(request->id()); !s.ok()) return s;
      auto job = core_.GetJob(request->id());
      if (!job.ok()) return job.status();
      if (auto s = AccessControl::RequireOwner(caller, *job, "changing the priority of"); !s.ok()) {
        return s;
      }
      v1::ResourceSpec resources = job->spec().resources();
      resources.set_priority(request->priority());
      if (auto s = access_.RequirePriorityAllowed(caller, resources, ""); !s.ok()) {
        return s;
      }
      auto changed = core_.SetJobPriority(request->id(), request->priority(), caller.name);
      if (!changed.ok()) return changed.status();
      *response = *std::move(changed);
      return absl::OkStatus();
    };
    absl::Status result = change();
    audit_.Record(caller, "SetJobPriority", request->id(), result);
    return result;
  });
}

grpc::ServerWriteReactor<v1::JobEvent>* CoordinatorService::WatchJob(
    grpc::CallbackServerContext* context, const v1::WatchJobRequest* request) {
  auto caller = access_.IdentifyUser(*context);
  if (!caller.ok()) return WatchReactor::Fail(hub_, reads_, ToGrpcStatus(caller.status()));
  // Whose job it is decides whether its log lines are shown, and its newest event how far
  // a watch may start: one lookup (memory for a live job, one indexed row for a finished
  // one).
  auto job = JobFor(*caller, request->id());
  if (!job.ok()) return WatchReactor::Fail(hub_, reads_, ToGrpcStatus(job.status()));
  const bool include_logs = !access_.enabled() || AccessControl::Owns(*caller, *job);
  // A client resumes at the last event it saw + 1; a start beyond that was never handed
  // out, and would otherwise wait silently for events that may never come.
  if (request->from_seq() > job->last_event_seq() + 1) {
    return WatchReactor::Fail(
        hub_, reads_,
        grpc::Status(grpc::StatusCode::OUT_OF_RANGE,
                     absl::StrCat("from_seq: ", request->from_seq(), " is beyond job ",
                                  request->id(), "'s newest event (", job->last_event_seq(),
                                  "); resume at the last seq seen + 1")));
  }
  auto lease = watch_quota_.Acquire(caller->name);
  if (lease == nullptr) {
    return WatchReactor::Fail(
        hub_, reads_,
        grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                     absl::StrCat(caller->name, " has ", watch_quota_.per_caller(),
                                  " watch streams open, as many as one caller may "
                                  "(--max-watch-streams); close one first")));
  }
  return WatchReactor::Start(hub_, reads_, request->id(), request->from_seq(), include_logs,
                             std::move(lease));
}

grpc::ServerUnaryReactor* CoordinatorService::GetCluster(grpc::CallbackServerContext* context,
                                                         const v1::GetClusterRequest* request,
                                                         v1::Cluster* response) {
  (void)request;
  return Defer(context, [this, response](const Caller& caller) -> absl::Status {
    if (auto s = AccessControl::Require(caller, security::Role::kViewer, "reading the cluster");
        !s.ok()) {
      return s;
    }
    *response = core_.GetCluster();
    return absl::OkStatus();
  });
}

}  // namespace stoke::server

namespace stoke::server {

grpc::ServerUnaryReactor* CoordinatorService::ListCheckpoints(
    grpc::CallbackServerContext* context, const v1::ListCheckpointsRequest* request,
    v1::ListCheckpointsResponse* response) {
  return Defer(context, [this, request, response](const Caller& caller) -> absl::Status {
    auto job = JobFor(caller, request->id());
    if (!job.ok()) return job.status();
    if (auto s = AccessControl::RequireOwner(caller, *job, "listing the checkpoints"); !s.ok()) {
      return s;
    }
    auto checkpoints = core_.ListCheckpoints(request->id());
    if (!checkpoints.ok()) return checkpoints.status();
    for (const auto& c : *checkpoints) {
      v1::Checkpoint* out = response->add_checkpoints();
      out->set_step(c.step);
      out->set_size_bytes(c.size_bytes);
      out->set_path(c.path);
      *out->mutable_write_time() = ToProto(c.write_time);
    }
    return absl::OkStatus();
  });
}

grpc::ServerWriteReactor<v1::FileChunk>* CoordinatorService::DownloadModel(
    grpc::CallbackServerContext* context, const v1::DownloadModelRequest* request) {
  auto caller = access_.IdentifyUser(*context);
  if (!caller.ok()) return FileStreamReactor::Fail(ToGrpcStatus(caller.status()));
  auto refuse = [&](const absl::Status& status) {
    audit_.Record(*caller, "DownloadModel", request->id(), status);
    return FileStreamReactor::Fail(ToGrpcStatus(status));
  };
  // Choosing the file takes a few stat calls, made here; the file itself is read on the
  // executor, a chunk at a time.
  auto job = JobFor(*caller, request->id());
  if (!job.ok()) return refuse(job.status());
  if (auto s = AccessControl::RequireOwner(*caller, *job, "exporting the model"); !s.ok()) {
    return refuse(s);
  }
  auto checkpoints = core_.ListCheckpoints(request->id());
  if (!checkpoints.ok()) return FileStreamReactor::Fail(ToGrpcStatus(checkpoints.status()));
  if (checkpoints->empty()) {
    return FileStreamReactor::Fail(grpc::Status(
        grpc::StatusCode::FAILED_PRECONDITION, "job " + request->id() + " has no checkpoints yet"));
  }
  const CheckpointFiles* chosen = &checkpoints->back();
  if (request->step() != 0) {
    chosen = nullptr;
    std::vector<std::string> steps;
    for (const auto& c : *checkpoints) {
      if (c.step == request->step()) chosen = &c;
      steps.push_back(std::to_string(c.step));
    }
    if (chosen == nullptr) {
      return FileStreamReactor::Fail(
          grpc::Status(grpc::StatusCode::NOT_FOUND,
                       absl::StrCat("job ", request->id(), " has no checkpoint at step ",
                                    request->step(), "; it has ", absl::StrJoin(steps, ", "))));
    }
  }
  auto name = ExportFileName(job->spec(), request->format());
  if (!name.ok()) return refuse(name.status());
  const std::string path = chosen->path + "/" + *name;
  struct stat st;
  if (lstat(path.c_str(), &st) != 0) {
    return refuse(absl::NotFoundError(absl::StrCat("job ", request->id(), "'s checkpoint at step ",
                                                   chosen->step, " has no ", *name,
                                                   " (a worker older than that export wrote it)")));
  }
  audit_.Record(*caller, "DownloadModel", absl::StrCat(request->id(), "@", chosen->step),
                absl::OkStatus());
  // Opened beneath the job's folder (<job>/checkpoints/step-N/...) only.
  const std::string job_dir = chosen->path.substr(0, chosen->path.rfind("/checkpoints/"));
  return FileStreamReactor::Start(executor_, job_dir, path, chosen->step);
}

grpc::ServerUnaryReactor* CoordinatorService::ListAudit(grpc::CallbackServerContext* context,
                                                        const v1::ListAuditRequest* request,
                                                        v1::ListAuditResponse* response) {
  return Defer(context, [this, request, response](const Caller& caller) -> absl::Status {
    if (auto s = AccessControl::Require(caller, security::Role::kAdmin, "reading the audit log");
        !s.ok()) {
      return s;
    }
    uint64_t before = 0;
    const std::string& token = request->page_token();
    if (!token.empty()) {
      auto [end, ec] = std::from_chars(token.data(), token.data() + token.size(), before);
      if (ec != std::errc() || end != token.data() + token.size()) {
        return absl::InvalidArgumentError("page_token: not a token returned by ListAudit");
      }
    }
    const uint32_t limit =
        request->page_size() == 0 ? kDefaultPageSize : std::min(request->page_size(), kMaxPageSize);
    auto page = audit_.List(before, limit);
    if (!page.ok()) return page.status();
    for (auto& entry : page->entries) *response->add_entries() = std::move(entry);
    if (page->more && response->entries_size() > 0) {
      response->set_next_page_token(
          std::to_string(response->entries(response->entries_size() - 1).id()));
    }
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* CoordinatorService::WhoAmI(grpc::CallbackServerContext* context,
                                                     const v1::WhoAmIRequest* request,
                                                     v1::WhoAmIResponse* response) {
  (void)request;
  return Defer(context, [this, response](const Caller& caller) -> absl::Status {
    response->set_name(caller.name);
    response->set_role(security::RoleName(caller.role));
    response->set_authentication_required(access_.enabled());
    return absl::OkStatus();
  });
}

}  // namespace stoke::server
