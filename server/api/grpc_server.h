// Builds and runs the coordinator's gRPC server: the given services plus the standard
// health service and server reflection, so grpcurl and health probes work unchanged.
#pragma once

#include "server/api/rpc_observer.h"

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/stoke/v1/limits.h"
#include "spec/addresses.h"

namespace stoke::server {

class GrpcServer {
 public:
  struct Options {
    // host:port; port 0 picks a free one (see address()).
    std::string address = defaults::kCoordinatorAddress;
    int max_message_bytes = v1::kMaxMessageBytes;
    // Told of every call (for /metrics); may be null. Must outlive the server.
    RpcObserver* observer = nullptr;
    // TLS (security::MakeServerCredentials); null means plaintext.
    std::shared_ptr<grpc::ServerCredentials> credentials;
  };

  static absl::StatusOr<std::unique_ptr<GrpcServer>> Start(
      const Options& options, const std::vector<grpc::Service*>& services);
  ~GrpcServer();

  // The address it listens on, with the port it actually bound.
  const std::string& address() const { return address_; }
  // What the standard health service answers: SERVING, or NOT_SERVING (draining).
  void SetServing(bool serving);
  // Stops taking calls, ends open streams after `grace`, and waits for the handlers.
  void Shutdown(std::chrono::milliseconds grace);

 private:
  GrpcServer(std::unique_ptr<grpc::Server> server, std::string address)
      : server_(std::move(server)), address_(std::move(address)) {}

  std::unique_ptr<grpc::Server> server_;
  std::string address_;
  bool shut_down_ = false;
};

}  // namespace stoke::server
