#include "client/lib/client.h"

#include <fcntl.h>
#include <unistd.h>

#include <grpcpp/grpcpp.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "proto/stoke/v1/limits.h"
#include "security/coordinator_target.h"
#include "security/grpc_credentials.h"

namespace stoke::client {

absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
}

absl::StatusOr<std::unique_ptr<Client>> Client::Connect(const ClientOptions& given) {
  ClientOptions options = given;
  // A token pasted with its line end is meant without it. Anything else outside printable
  // ASCII cannot be sent as gRPC metadata (gRPC would abort the process): refused here.
  options.token = std::string(absl::StripAsciiWhitespace(options.token));
  for (size_t i = 0; i < options.token.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(options.token[i]);
    if (c < 0x21 || c > 0x7e) {
      return absl::UnauthenticatedError(absl::StrCat(
          "the token (STOKE_TOKEN, or token: in the config file) holds a space, line break or "
          "other unprintable byte at position ",
          i, "; a token is one word of printable ASCII, as `stoke token create` prints it"));
    }
  }
  auto credentials =
      security::MakeChannelCredentials({options.tls_ca, options.tls_cert, options.tls_key});
  if (!credentials.ok()) return credentials.status();
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 2'000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 20'000);
  args.SetMaxReceiveMessageSize(v1::kMaxMessageBytes);
  args.SetMaxSendMessageSize(v1::kMaxMessageBytes);
  // A comma-separated list names a leader and its standbys.
  auto target = security::CoordinatorTarget(options.address, "coordinator address", &args);
  if (!target.ok()) return target.status();
  auto channel = grpc::CreateCustomChannel(*target, *credentials, args);
  return std::unique_ptr<Client>(new Client(options, std::move(channel)));
}

void Client::Authorize(grpc::ClientContext& context) const {
  if (!options_.token.empty()) context.AddMetadata("authorization", "Bearer " + options_.token);
}

void Client::PrepareContext(grpc::ClientContext& context) const {
  context.set_deadline(std::chrono::system_clock::now() + options_.call_timeout);
  // With a leader and standbys, a call waits (up to its deadline) for the new leader.
  if (security::IsCoordinatorList(options_.address)) context.set_wait_for_ready(true);
  Authorize(context);
}

absl::StatusOr<v1::ListAuditResponse> Client::ListAudit(const v1::ListAuditRequest& request) {
  grpc::ClientContext context;
  PrepareContext(context);
  v1::ListAuditResponse response;
  auto status = FromGrpcStatus(stub_->ListAudit(&context, request, &response));
  if (!status.ok()) return status;
  return response;
}

absl::StatusOr<v1::WhoAmIResponse> Client::WhoAmI() {
  grpc::ClientContext context;
  PrepareContext(context);
  v1::WhoAmIResponse response;
  auto status = FromGrpcStatus(stub_->WhoAmI(&context, v1::WhoAmIRequest(), &response));
  if (!status.ok()) return status;
  return response;
}

absl::StatusOr<v1::ValidateJobResponse> Client::ValidateJob(const v1::ValidateJobRequest& request) {
  grpc::ClientContext context;
  PrepareContext(context);
  v1::ValidateJobResponse response;
  auto status = FromGrpcStatus(stub_->ValidateJob(&context, request, &response));
  if (!status.ok()) return status;
  return response;
}

namespace {

// 128 random bits, in hex: unique among every submission a coordinator will see.
std::string NewRequestId() {
  std::random_device random;
  std::string id;
  for (int i = 0; i < 4; ++i) absl::StrAppend(&id, absl::Hex(random(), absl::kZeroPad8));
  return id;
}

// All of `data` to `fd`; false (errno set) when a write fails (a full disk, say).
bool WriteAll(int fd, const std::string& data) {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

absl::StatusOr<v1::Job> Client::SubmitJob(const v1::JobSpec& spec, std::string request_id,
                                          const v1::CodeBundle& code) {
  v1::SubmitJobRequest request;
  *request.mutable_spec() = spec;
  if (code.files_size() > 0) *request.mutable_code() = code;
  request.set_request_id(request_id.empty() ? NewRequestId() : std::move(request_id));
  absl::Status status;
  for (int attempt = 0; attempt < 3; ++attempt) {
    if (attempt > 0) std::this_thread::sleep_for(std::chrono::milliseconds(500 * attempt));
    grpc::ClientContext context;
    PrepareContext(context);
    v1::SubmitJobResponse response;
    status = FromGrpcStatus(stub_->SubmitJob(&context, request, &response));
    if (status.ok()) return response.job();
    if (status.code() != absl::StatusCode::kUnavailable &&
        status.code() != absl::StatusCode::kDeadlineExceeded) {
      break;
    }
  }
  return status;
}

absl::StatusOr<v1::Job> Client::GetJob(const std::string& id) {
  grpc::ClientContext context;
  PrepareContext(context);
  v1::GetJobRequest request;
  request.set_id(id);
  v1::Job job;
  auto status = FromGrpcStatus(stub_->GetJob(&context, request, &job));
  if (!status.ok()) return status;
  return job;
}

absl::StatusOr<v1::ListJobsResponse> Client::ListJobs(const v1::ListJobsRequest& request) {
  grpc::ClientContext context;
  PrepareContext(context);
  v1::ListJobsResponse response;
  auto status = FromGrpcStatus(stub_->ListJobs(&context, request, &response));
  if (!status.ok()) return status;
  return response;
}

absl::StatusOr<v1::Job> Client::CancelJob(const std::string& id, const std::string& reason) {
  grpc::ClientContext context;
  PrepareContext(context);
  v1::CancelJobRequest request;
  request.set_id(id);
  request.set_reason(reason);
  v1::Job job;
  auto status = FromGrpcStatus(stub_->CancelJob(&context, request, &job));
  if (!status.ok()) return status;
  return job;
}

absl::StatusOr<v1::Job> Client::SetJobPriority(const std::string& id, int32_t priority) {
  grpc::ClientContext context;
  PrepareContext(context);
  v1::SetJobPriorityRequest request;
  request.set_id(id);
  request.set_priority(priority);
  v1::Job job;
  auto status = FromGrpcStatus(stub_->SetJobPriority(&context, request, &job));
  if (!status.ok()) return status;
  return job;
}

absl::StatusOr<v1::Cluster> Client::GetCluster() {
  grpc::ClientContext context;
  PrepareContext(context);
  v1::Cluster cluster;
  auto status = FromGrpcStatus(stub_->GetCluster(&context, v1::GetClusterRequest(), &cluster));
  if (!status.ok()) return status;
  return cluster;
}

absl::StatusOr<v1::ListCheckpointsResponse> Client::ListCheckpoints(const std::string& id) {
  grpc::ClientContext context;
  PrepareContext(context);
  v1::ListCheckpointsRequest request;
  request.set_id(id);
  v1::ListCheckpointsResponse response;
  auto status = FromGrpcStatus(stub_->ListCheckpoints(&context, request, &response));
  if (!status.ok()) return status;
  return response;
}

absl::StatusOr<Client::Download> Client::DownloadModel(const std::string& id, uint64_t step,
                                                       const std::string& path,
                                                       v1::ModelFormat format) {
  const std::string partial = path + ".partial";
  // A new file, never through a link someone planted at its name: an old one there (a
  // download that was interrupted, or a link) is removed, not followed.
  unlink(partial.c_str());
  const int out = open(partial.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (out < 0) {
    return absl::UnavailableError(absl::StrCat(path, ": cannot write: ", std::strerror(errno)));
  }
  grpc::ClientContext context;
  Authorize(context);
  v1::DownloadModelRequest request;
  request.set_id(id);
  request.set_step(step);
  request.set_format(format);
  auto reader = stub_->DownloadModel(&context, request);
  Download download;
  uint64_t expected = 0;
  v1::FileChunk chunk;
  std::string write_error;  // the first failed write's cause (a full disk, say)
  while (reader->Read(&chunk)) {
    if (chunk.total_bytes() > 0 || chunk.step() > 0) {
      expected = chunk.total_bytes();
      download.step = chunk.step();
    }
    if (!WriteAll(out, chunk.data())) {
      write_error = std::strerror(errno);
      context.TryCancel();  // no use receiving the rest
      break;
    }
    download.bytes += chunk.data().size();
  }
  auto status = FromGrpcStatus(reader->Finish());
  if (close(out) != 0 && write_error.empty()) write_error = std::strerror(errno);
  if (!write_error.empty()) {
    status = absl::UnavailableError(absl::StrCat(path, ": cannot write: ", write_error));
  } else if (status.ok() && download.bytes != expected) {
    status = absl::DataLossError(
        absl::StrCat(path, ": received ", download.bytes, " of ", expected, " bytes"));
  }
  if (!status.ok()) {
    std::remove(partial.c_str());
    return status;
  }
  if (std::rename(partial.c_str(), path.c_str()) != 0) {
    return absl::UnavailableError(absl::StrCat(path, ": cannot write: ", std::strerror(errno)));
  }
  return download;
}

absl::Status Client::WatchJob(const std::string& id, const WatchOptions& options,
                              const std::function<bool(const v1::JobEvent&)>& on_event,
                              const std::function<void(const absl::Status&)>& on_reconnect) {
  uint64_t next_seq = std::max<uint64_t>(options.from_seq, 1);
  auto unreachable_since = std::chrono::steady_clock::now();
  auto backoff = std::chrono::milliseconds(200);
  for (;;) {
    // A coordinator that is restarting gets reconnect_for to come back. The stream itself
    // has no deadline: a job may train for days.
    const auto waited = std::chrono::steady_clock::now() - unreachable_since;
    if (!channel_->WaitForConnected(
            std::chrono::system_clock::now() + options.reconnect_for -
            std::min<std::chrono::steady_clock::duration>(waited, options.reconnect_for))) {
      return absl::UnavailableError(
          absl::StrCat("cannot reach the coordinator at ", options_.address, " to watch job ", id));
    }
    grpc::ClientContext context;
    Authorize(context);
    v1::WatchJobRequest request;
    request.set_id(id);
    request.set_from_seq(next_seq);
    auto reader = stub_->WatchJob(&context, request);
    v1::JobEvent event;
    bool delivered_any = false;
    while (reader->Read(&event)) {
      delivered_any = true;
      if (event.seq() < next_seq) continue;  // never deliver one twice
      next_seq = event.seq() + 1;
      if (!on_event(event)) {
        context.TryCancel();
        reader->Finish();
        return absl::OkStatus();
      }
    }
    absl::Status status = FromGrpcStatus(reader->Finish());
    if (status.ok()) return status;  // the job finished and every event was delivered
    // Only a lost connection is worth another try; a wrong id is not.
    if (status.code() != absl::StatusCode::kUnavailable &&
        status.code() != absl::StatusCode::kDeadlineExceeded &&
        status.code() != absl::StatusCode::kCancelled) {
      return status;
    }
    const auto now = std::chrono::steady_clock::now();
    if (delivered_any) unreachable_since = now;
    if (now - unreachable_since > options.reconnect_for) {
      return absl::UnavailableError(absl::StrCat("lost the coordinator at ", options_.address,
                                                 " while watching job ", id, ": ",
                                                 status.message()));
    }
    if (on_reconnect) on_reconnect(status);
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, std::chrono::milliseconds(2'000));
  }
}

}  // namespace stoke::client
