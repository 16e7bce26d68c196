// The public stoke.v1.Coordinator service over gRPC's callback API. Handlers validate the
// request, hand the work to the executor (the core may wait on its lock or the store),
// and translate the result; they hold no state of their own.
#pragma once

#include "server/api/access_control.h"
#include "server/api/audit_log.h"
#include "server/api/executor.h"
#include "server/api/stream_quota.h"
#include "server/core/coordinator.h"
#include "server/core/event_hub.h"
#include "spec/data_checks.h"
#include "stoke/v1/coordinator.grpc.pb.h"

namespace stoke::server {

class CoordinatorService final : public v1::Coordinator::CallbackService {
 public:
  // `reads` runs GetJob, ListJobs and the watchers' reads; `executor` the rest. Apart,
  // so that reads (which never take the core's lock) do not queue behind calls waiting
  // for it while a transition syncs to disk.
  CoordinatorService(Coordinator& core, EventHub& hub, Executor& executor, Executor& reads,
                     spec::DataRoots data_roots, const AccessControl& access, AuditLog& audit)
      : core_(core),
        hub_(hub),
        executor_(executor),
        reads_(reads),
        data_roots_(std::move(data_roots)),
        access_(access),
        audit_(audit) {
    CheckRequestDecoding();
  }

  // WatchJob streams one caller may hold open at once; more are RESOURCE_EXHAUSTED.
  static constexpr size_t kDefaultWatchStreamsPerCaller = 256;
  void LimitWatchStreams(size_t per_caller) { watch_quota_.set_per_caller(per_caller); }

  grpc::ServerUnaryReactor* SubmitJob(grpc::CallbackServerContext* context,
                                      const v1::SubmitJobRequest* request,
                                      v1::SubmitJobResponse* response) override;
  grpc::ServerUnaryReactor* ValidateJob(grpc::CallbackServerContext* context,
                                        const v1::ValidateJobRequest* request,
                                        v1::ValidateJobResponse* response) override;
  grpc::ServerUnaryReactor* GetJob(grpc::CallbackServerContext* context,
                                   const v1::GetJobRequest* request, v1::Job* response) override;
  grpc::ServerUnaryReactor* ListJobs(grpc::CallbackServerContext* context,
                                     const v1::ListJobsRequest* request,
                                     v1::ListJobsResponse* response) override;
  grpc::ServerUnaryReactor* CancelJob(grpc::CallbackServerContext* context,
                                      const v1::CancelJobRequest* request,
                                      v1::Job* response) override;
  grpc::ServerUnaryReactor* SetJobPriority(grpc::CallbackServerContext* context,
                                           const v1::SetJobPriorityRequest* request,
                                           v1::Job* response) override;
  grpc::ServerWriteReactor<v1::JobEvent>* WatchJob(grpc::CallbackServerContext* context,
                                                   const v1::WatchJobRequest* request) override;
  grpc::ServerUnaryReactor* GetCluster(grpc::CallbackServerContext* context,
                                       const v1::GetClusterRequest* request,
                                       v1::Cluster* response) override;
  grpc::ServerUnaryReactor* ListCheckpoints(grpc::CallbackServerContext* context,
                                            const v1::ListCheckpointsRequest* request,
                                            v1::ListCheckpointsResponse* response) override;
  grpc::ServerWriteReactor<v1::FileChunk>* DownloadModel(
      grpc::CallbackServerContext* context, const v1::DownloadModelRequest* request) override;
  grpc::ServerUnaryReactor* ListAudit(grpc::CallbackServerContext* context,
                                      const v1::ListAuditRequest* request,
                                      v1::ListAuditResponse* response) override;
  grpc::ServerUnaryReactor* WhoAmI(grpc::CallbackServerContext* context,
                                   const v1::WhoAmIRequest* request,
                                   v1::WhoAmIResponse* response) override;

 private:
  // Puts every method behind a handler that refuses an undecodable request naming the
  // field (checked_request_handler.h), where gRPC would answer UNIMPLEMENTED.
  void CheckRequestDecoding();
  // Identifies the caller (from the call's metadata, on gRPC's thread), then runs `work`
  // on the executor (or `on`) and finishes the call with its status. A caller who cannot be
  // identified gets UNAUTHENTICATED and `work` never runs.
  grpc::ServerUnaryReactor* Defer(grpc::CallbackServerContext* context,
                                  std::function<absl::Status(const Caller&)> work,
                                  Executor* on = nullptr);
  // `*audited`: set when the new job's audit entry was stored with it.
  absl::Status Submit(const Caller& caller, const v1::SubmitJobRequest& request,
                      v1::SubmitJobResponse& response, bool* audited);
  absl::Status Validate(const Caller& caller, const v1::ValidateJobRequest& request,
                        v1::ValidateJobResponse& response) const;
  // The job if `caller` may see it at all, redacted unless it owns it.
  absl::StatusOr<v1::Job> JobFor(const Caller& caller, const std::string& id);

  Coordinator& core_;
  EventHub& hub_;
  Executor& executor_;
  Executor& reads_;
  const spec::DataRoots data_roots_;
  const AccessControl& access_;
  AuditLog& audit_;
  StreamQuota watch_quota_{kDefaultWatchStreamsPerCaller};
};

}  // namespace stoke::server
