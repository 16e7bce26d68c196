// libstoke_client: a typed C++ wrapper over the stoke.v1.Coordinator stub. Calls return
// absl::Status(Or) with the server's code and message; WatchJob reconnects by itself and
// resumes from the last event it delivered, so a caller sees every event once, in order.
#pragma once

#include <grpcpp/channel.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "spec/addresses.h"
#include "stoke/v1/coordinator.grpc.pb.h"

namespace stoke::client {

struct ClientOptions {
  // host:port of the coordinator.
  std::string address = defaults::kCoordinatorAddress;
  // Deadline of each unary call.
  std::chrono::milliseconds call_timeout{10'000};
  // Bearer token for coordinators with --auth-tokens; empty sends none.
  std::string token{};
  // PEM CA file to verify the coordinator with: TLS when set, plaintext when empty.
  std::string tls_ca{};
  // PEM client certificate and key, for coordinators that ask for mutual TLS.
  std::string tls_cert{};
  std::string tls_key{};
};

struct WatchOptions {
  // First event to deliver; 0 or 1 means from the start.
  uint64_t from_seq = 1;
  // Give up when the coordinator cannot be reached again for this long.
  std::chrono::milliseconds reconnect_for{60'000};
};

class Client {
 public:
  // Does not contact the coordinator; the first call does. Fails only when the TLS files
  // cannot be read, and (UNAUTHENTICATED) for a token that cannot be sent: a line break or
  // space within it (whitespace around it is dropped).
  static absl::StatusOr<std::unique_ptr<Client>> Connect(const ClientOptions& given);

  // Safe to retry: every submission carries a request id (a random one unless given), and
  // a call that fails as UNAVAILABLE or DEADLINE_EXCEEDED (the answer may have been lost)
  // is tried again, up to 3 times, with the same id, so it never creates a second job.
  // `code`: a Python model's or a script job's folder (ReadJobCode in job_spec_file.h).
  absl::StatusOr<v1::Job> SubmitJob(const v1::JobSpec& spec, std::string request_id = "",
                                    const v1::CodeBundle& code = {});
  // Every problem the coordinator finds with a job, storing nothing (see ValidateJob in
  // coordinator.proto). UNIMPLEMENTED from a coordinator older than the call.
  absl::StatusOr<v1::ValidateJobResponse> ValidateJob(const v1::ValidateJobRequest& request);
  absl::StatusOr<v1::Job> GetJob(const std::string& id);
  absl::StatusOr<v1::ListJobsResponse> ListJobs(const v1::ListJobsRequest& request);
  absl::StatusOr<v1::Job> CancelJob(const std::string& id, const std::string& reason = "");
  absl::StatusOr<v1::Job> SetJobPriority(const std::string& id, int32_t priority);
  absl::StatusOr<v1::Cluster> GetCluster();
  absl::StatusOr<v1::ListAuditResponse> ListAudit(const v1::ListAuditRequest& request);
  absl::StatusOr<v1::WhoAmIResponse> WhoAmI();
  absl::StatusOr<v1::ListCheckpointsResponse> ListCheckpoints(const std::string& id);
  // Writes a checkpoint's model (the newest when step is 0) to `path`, through a
  // temporary file renamed at the end. Returns the checkpoint's step and the bytes written.
  struct Download {
    uint64_t step = 0;
    uint64_t bytes = 0;
  };
  absl::StatusOr<Download> DownloadModel(const std::string& id, uint64_t step,
                                         const std::string& path,
                                         v1::ModelFormat format = v1::MODEL_FORMAT_UNSPECIFIED);

  // Calls on_event for each event of the job from options.from_seq on, until the job has
  // finished and its last event was delivered (OK), on_event returns false (OK), or the
  // coordinator stays unreachable past options.reconnect_for (UNAVAILABLE).
  // on_reconnect, if set, is told each time the stream is being re-established.
  absl::Status WatchJob(const std::string& id, const WatchOptions& options,
                        const std::function<bool(const v1::JobEvent&)>& on_event,
                        const std::function<void(const absl::Status&)>& on_reconnect = nullptr);

 private:
  Client(const ClientOptions& options, std::shared_ptr<grpc::Channel> channel)
      : options_(options), channel_(channel), stub_(v1::Coordinator::NewStub(channel)) {}
  // Deadline and credentials of a unary call.
  void PrepareContext(grpc::ClientContext& context) const;
  // Credentials only (streams run without a deadline).
  void Authorize(grpc::ClientContext& context) const;

  ClientOptions options_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Coordinator::Stub> stub_;
};

// grpc::Status to absl::Status, keeping code and message.
absl::Status FromGrpcStatus(const grpc::Status& status);

}  // namespace stoke::client
