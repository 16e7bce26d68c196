// The one place where the core's absl::Status becomes a grpc::Status.
#pragma once

#include <grpcpp/support/status.h>

#include "absl/status/status.h"

namespace stoke::server {

grpc::Status ToGrpcStatus(const absl::Status& status);

}  // namespace stoke::server
