// A gRPC server interceptor that reports every call to an RpcObserver: method, status
// code, and (unary calls) how long the server took from receiving it to answering.
#pragma once

#include <grpcpp/support/server_interceptor.h>

#include <memory>

#include "server/api/rpc_observer.h"

namespace stoke::server {

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> MakeRpcInterceptorFactory(
    RpcObserver& observer);

}  // namespace stoke::server
