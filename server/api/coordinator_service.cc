#include "server/api/coordinator_service.h"

#include <charconv>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "proto/stoke/v1/limits.h"
#include "server/api/file_stream_reactor.h"
#include "server/api/grpc_status.h"
#include "server/api/job_spec_rules.h"
#include "server/api/watch_reactor.h"
#include "server/common/time_util.h"

namespace stoke::server {
namespace {

using v1::kDefaultPageSize;
using v1::kMaxPageSize;

absl::Status RequireId(const std::string& id) {
  if (id.empty()) return absl::InvalidArgumentError("id: required");
  if (id.size() > v1::kMaxIdBytes) {
    return absl::InvalidArgumentError(absl::StrCat("id: at most ", v1::kMaxIdBytes, " bytes"));
  }
  return absl::OkStatus();
}

}  // namespace

grpc::ServerUnaryReactor* CoordinatorService::Defer(grpc::CallbackServerContext* context,
                                                    std::function<absl::Status()> work) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  executor_.Post([reactor, work = std::move(work)] { reactor->Finish(ToGrpcStatus(work())); });
  return reactor;
}

grpc::ServerUnaryReactor* CoordinatorService::SubmitJob(grpc::CallbackServerContext* context,
                                                        const v1::SubmitJobRequest* request,
                                                        v1::SubmitJobResponse* response) {
  return Defer(context, [this, request, response]() -> absl::Status {
    if (!request->has_spec()) return absl::InvalidArgumentError("spec: required");
    if (request->request_id().size() > v1::kMaxIdBytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("request_id: at most ", v1::kMaxIdBytes, " bytes"));
    }
    v1::JobSpec spec = request->spec();
    // Fields this coordinator does not know are never stored: they would ride along in
    // every ListJobs answer and every assignment.
    spec.DiscardUnknownFields();
    if (const size_t bytes = spec.ByteSizeLong(); bytes > v1::kMaxSpecBytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("spec: ", bytes, " bytes; a job spec may take at most ", v1::kMaxSpecBytes));
    }
    auto in_spec = [](const absl::Status& s) {
      return absl::Status(s.code(), absl::StrCat("spec.", s.message()));
    };
    if (auto s = ValidateJobSpec(spec); !s.ok()) return in_spec(s);
    auto data = InspectData(spec, data_roots_);
    if (!data.ok()) return in_spec(data.status());
    if (auto s = ValidateAgainstData(spec, *data); !s.ok()) return in_spec(s);
    ApplyJobSpecDefaults(spec, *data);
    auto job = core_.SubmitJob(spec, request->request_id());
    if (!job.ok()) return job.status();
    *response->mutable_job() = *std::move(job);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* CoordinatorService::GetJob(grpc::CallbackServerContext* context,
                                                     const v1::GetJobRequest* request,
                                                     v1::Job* response) {
  return Defer(context, [this, request, response]() -> absl::Status {
    if (auto s = RequireId(request->id()); !s.ok()) return s;
    auto job = core_.GetJob(request->id());
    if (!job.ok()) return job.status();
    *response = *std::move(job);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* CoordinatorService::ListJobs(grpc::CallbackServerContext* context,
                                                       const v1::ListJobsRequest* request,
                                                       v1::ListJobsResponse* response) {
  return Defer(context, [this, request, response]() -> absl::Status {
    JobQuery query;
    for (int state : request->states()) {
      if (!v1::JobState_IsValid(state) || state == v1::JOB_STATE_UNSPECIFIED) {
        return absl::InvalidArgumentError(absl::StrCat("states: unknown job state ", state));
      }
      query.states.push_back(static_cast<v1::JobState>(state));
    }
    query.limit =
        request->page_size() == 0 ? kDefaultPageSize : std::min(request->page_size(), kMaxPageSize);
    const std::string& token = request->page_token();
    if (!token.empty()) {
      auto [end, ec] = std::from_chars(token.data(), token.data() + token.size(), query.before_id);
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
      *response->add_jobs() = std::move(job);
    }
    if ((page->more || cut) && response->jobs_size() > 0) {
      response->set_next_page_token(response->jobs(response->jobs_size() - 1).id());
    }
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* CoordinatorService::CancelJob(grpc::CallbackServerContext* context,
                                                        const v1::CancelJobRequest* request,
                                                        v1::Job* response) {
  return Defer(context, [this, request, response]() -> absl::Status {
    if (auto s = RequireId(request->id()); !s.ok()) return s;
    if (request->reason().size() > v1::kMaxReasonBytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("reason: at most ", v1::kMaxReasonBytes, " bytes"));
    }
    auto job = core_.CancelJob(request->id(), request->reason());
    if (!job.ok()) return job.status();
    *response = *std::move(job);
    return absl::OkStatus();
  });
}

grpc::ServerWriteReactor<v1::JobEvent>* CoordinatorService::WatchJob(
    grpc::CallbackServerContext* context, const v1::WatchJobRequest* request) {
  (void)context;
  return WatchReactor::Start(hub_, executor_, request->id(), request->from_seq());
}

grpc::ServerUnaryReactor* CoordinatorService::GetCluster(grpc::CallbackServerContext* context,
                                                         const v1::GetClusterRequest* request,
                                                         v1::Cluster* response) {
  (void)request;
  return Defer(context, [this, response]() -> absl::Status {
    *response = core_.GetCluster();
    return absl::OkStatus();
  });
}

}  // namespace stoke::server

namespace stoke::server {

grpc::ServerUnaryReactor* CoordinatorService::ListCheckpoints(
    grpc::CallbackServerContext* context, const v1::ListCheckpointsRequest* request,
    v1::ListCheckpointsResponse* response) {
  return Defer(context, [this, request, response]() -> absl::Status {
    if (auto s = RequireId(request->id()); !s.ok()) return s;
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
  (void)context;
  // Choosing the file takes a few stat calls, made here; the file itself is read on the
  // executor, a chunk at a time.
  if (auto s = RequireId(request->id()); !s.ok()) {
    return FileStreamReactor::Fail(ToGrpcStatus(s));
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
  return FileStreamReactor::Start(executor_, chosen->model_path, chosen->step);
}

}  // namespace stoke::server
