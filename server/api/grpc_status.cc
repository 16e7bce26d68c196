#include "server/api/grpc_status.h"

#include <string>

namespace stoke::server {

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  grpc::StatusCode code;
  switch (status.code()) {
    case absl::StatusCode::kCancelled:
      code = grpc::StatusCode::CANCELLED;
      break;
    case absl::StatusCode::kInvalidArgument:
      code = grpc::StatusCode::INVALID_ARGUMENT;
      break;
    case absl::StatusCode::kDeadlineExceeded:
      code = grpc::StatusCode::DEADLINE_EXCEEDED;
      break;
    case absl::StatusCode::kNotFound:
      code = grpc::StatusCode::NOT_FOUND;
      break;
    case absl::StatusCode::kAlreadyExists:
      code = grpc::StatusCode::ALREADY_EXISTS;
      break;
    case absl::StatusCode::kPermissionDenied:
      code = grpc::StatusCode::PERMISSION_DENIED;
      break;
    case absl::StatusCode::kResourceExhausted:
      code = grpc::StatusCode::RESOURCE_EXHAUSTED;
      break;
    case absl::StatusCode::kFailedPrecondition:
      code = grpc::StatusCode::FAILED_PRECONDITION;
      break;
    case absl::StatusCode::kAborted:
      code = grpc::StatusCode::ABORTED;
      break;
    case absl::StatusCode::kOutOfRange:
      code = grpc::StatusCode::OUT_OF_RANGE;
      break;
    case absl::StatusCode::kUnimplemented:
      code = grpc::StatusCode::UNIMPLEMENTED;
      break;
    case absl::StatusCode::kUnavailable:
      code = grpc::StatusCode::UNAVAILABLE;
      break;
    case absl::StatusCode::kDataLoss:
      code = grpc::StatusCode::DATA_LOSS;
      break;
    case absl::StatusCode::kUnauthenticated:
      code = grpc::StatusCode::UNAUTHENTICATED;
      break;
    default:
      code = grpc::StatusCode::INTERNAL;
  }
  // Messages may echo what a client sent; a long one would exceed the limit on trailing
  // metadata (and lose the whole status), so it is cut.
  constexpr size_t kMaxMessageBytes = 2048;
  std::string message(status.message());
  if (message.size() > kMaxMessageBytes) {
    const size_t cut = message.size() - kMaxMessageBytes;
    message.resize(kMaxMessageBytes);
    while (!message.empty() && (static_cast<unsigned char>(message.back()) & 0xC0) == 0x80) {
      message.pop_back();  // not in the middle of a UTF-8 character
    }
    if (!message.empty() && static_cast<unsigned char>(message.back()) >= 0xC0) message.pop_back();
    message += "... (" + std::to_string(cut) + " more bytes)";
  }
  return grpc::Status(code, message);
}

}  // namespace stoke::server
