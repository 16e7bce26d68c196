#include "server/api/grpc_server.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>

#include "absl/strings/str_cat.h"
#include "server/api/rpc_interceptor.h"

namespace stoke::server {

absl::StatusOr<std::unique_ptr<GrpcServer>> GrpcServer::Start(
    const Options& options, const std::vector<grpc::Service*>& services) {
  const bool unix_socket = options.address.rfind("unix:", 0) == 0;
  auto colon = options.address.rfind(':');
  if (colon == std::string::npos || (unix_socket && options.address.size() == 5)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--address ", options.address, ": expected host:port, or unix:PATH for a socket"));
  }
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(
      options.address,
      options.credentials ? options.credentials : grpc::InsecureServerCredentials(), &port);
  builder.SetMaxReceiveMessageSize(options.max_message_bytes);
  builder.SetMaxSendMessageSize(options.max_message_bytes);
  // Workers and watchers hold streams for hours; keepalives notice a dead peer.
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, 30'000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, v1::kKeepaliveTimeoutMs);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS,
                             v1::kWorkerKeepaliveMs);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  // A connection that has not finished its HTTP/2 (and TLS) handshake within 10 s is
  // closed, and one idle without calls for 10 minutes: open but silent connections hold
  // the descriptors every client and worker needs (clients reconnect when they next call).
  builder.AddChannelArgument(GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS, 10'000);
  builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_IDLE_MS, 600'000);
  for (grpc::Service* service : services) builder.RegisterService(service);
  if (options.observer) {
    std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> creators;
    creators.push_back(MakeRpcInterceptorFactory(*options.observer));
    builder.experimental().SetInterceptorCreators(std::move(creators));
  }
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || port == 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", options.address,
                                               " (in use, or not an address of this host?)"));
  }
  // A unix socket is its own address; a TCP one gets the port chosen for ":0".
  std::string address =
      unix_socket ? options.address : absl::StrCat(options.address.substr(0, colon), ":", port);
  return std::unique_ptr<GrpcServer>(new GrpcServer(std::move(server), std::move(address)));
}

GrpcServer::~GrpcServer() { Shutdown(std::chrono::milliseconds(0)); }

void GrpcServer::SetServing(bool serving) {
  if (auto* health = server_->GetHealthCheckService()) health->SetServingStatus(serving);
}

void GrpcServer::Shutdown(std::chrono::milliseconds grace) {
  if (shut_down_) return;
  shut_down_ = true;
  server_->Shutdown(std::chrono::system_clock::now() + grace);
  server_->Wait();
}

}  // namespace stoke::server
