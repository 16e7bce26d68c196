// An error that keeps its absl::StatusCode across a throw. The training code below the
// loop throws (LibTorch does, and a torch::data-style pipeline has no other way out of a
// constructor); the code rides along so that the loop decides whether another attempt
// could succeed from what went wrong (a file not there yet, a peer unreachable: retry; a
// spec asking for the impossible: fail at once), not from the exception's type.
#pragma once

#include <stdexcept>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace stoke::worker {

class StatusError : public std::runtime_error {
 public:
  explicit StatusError(const absl::Status& status)
      : std::runtime_error(std::string(status.message())), code_(status.code()) {}
  absl::StatusCode code() const { return code_; }

 private:
  absl::StatusCode code_;
};

// Whether a later attempt may succeed where one failed with `code`. Transient: the
// service or file system is not there yet (UNAVAILABLE, NOT_FOUND: a data path not
// mounted yet), or a deadline, contention or an internal fault. Permanent: the request
// itself is wrong (INVALID_ARGUMENT, OUT_OF_RANGE, FAILED_PRECONDITION, UNIMPLEMENTED,
// PERMISSION_DENIED, ALREADY_EXISTS), the data is corrupt (DATA_LOSS), or the job asks
// for more memory than the device has (RESOURCE_EXHAUSTED: an allocation that failed
// fails again on the same device; the batch-size search handles the ones it provokes).
inline bool IsRetryable(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kResourceExhausted:
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kUnimplemented:
    case absl::StatusCode::kPermissionDenied:
    case absl::StatusCode::kAlreadyExists:
    case absl::StatusCode::kDataLoss:
      return false;
    default:
      return true;
  }
}

inline void ThrowIfError(const absl::Status& status) {
  if (!status.ok()) throw StatusError(status);
}

template <typename T>
T ValueOrThrow(absl::StatusOr<T> value) {
  ThrowIfError(value.status());
  return *std::move(value);
}

}  // namespace stoke::worker
