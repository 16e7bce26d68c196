// Method handlers that refuse an undecodable request with INVALID_ARGUMENT naming the
// field. gRPC 1.51's callback handlers answer a request that protobuf will not parse (a
// proto3 string that is not UTF-8, truncated bytes) with UNIMPLEMENTED and no message,
// before any of our code runs. These wrap the handlers the generated code would have
// made: decoding is gRPC's own, and only when it fails is a copy of the bytes walked
// (unparsable_request.h) and the call answered by a handler that finishes it with the
// reason. Interceptors (auth, metrics) see the call as for any other method.
//
// Installed from a service's constructor, in place of the generated handler:
//   MarkMethodCallback(index, CheckedUnary(this, &MyService::Method));
#pragma once

#include <grpcpp/impl/codegen/proto_utils.h>
#include <grpcpp/impl/codegen/server_callback_handlers.h>
#include <grpcpp/impl/rpc_service_method.h>
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/message_allocator.h>

#include <functional>
#include <memory>

#include <google/protobuf/descriptor.h>
#include <google/protobuf/wrappers.pb.h>

namespace stoke::server {

class CheckedRequestHandler final : public grpc::internal::MethodHandler {
 public:
  // `inner`: the typed handler. `discard`: frees what `inner`'s Deserialize set aside
  // for a call (its handler data) when decoding failed and the call goes elsewhere.
  CheckedRequestHandler(std::unique_ptr<grpc::internal::MethodHandler> inner,
                        const google::protobuf::Descriptor& request_type,
                        std::function<void(void*)> discard);

  void* Deserialize(grpc_call* call, grpc_byte_buffer* request, grpc::Status* status,
                    void** handler_data) override;
  void RunHandler(const HandlerParameter& param) override;

 private:
  std::unique_ptr<grpc::internal::MethodHandler> inner_;
  const google::protobuf::Descriptor& request_type_;
  std::function<void(void*)> discard_;
  // Finishes a call with INVALID_ARGUMENT and the reason it is handed as its "request".
  grpc::internal::CallbackUnaryHandler<google::protobuf::StringValue, grpc::ByteBuffer> refusal_;
};

template <class Service, class Request, class Response>
grpc::internal::MethodHandler* CheckedUnary(
    Service* service, grpc::ServerUnaryReactor* (Service::*method)(grpc::CallbackServerContext*,
                                                                   const Request*, Response*)) {
  auto inner = std::make_unique<grpc::internal::CallbackUnaryHandler<Request, Response>>(
      [service, method](grpc::CallbackServerContext* context, const Request* request,
                        Response* response) {
        return (service->*method)(context, request, response);
      });
  return new CheckedRequestHandler(std::move(inner), *Request::descriptor(), [](void* data) {
    // The unary handler's request and response, made whether or not decoding succeeds.
    if (data != nullptr) static_cast<grpc::MessageHolder<Request, Response>*>(data)->Release();
  });
}

template <class Service, class Request, class Response>
grpc::internal::MethodHandler* CheckedServerStreaming(
    Service* service,
    grpc::ServerWriteReactor<Response>* (Service::*method)(grpc::CallbackServerContext*,
                                                           const Request*)) {
  auto inner = std::make_unique<grpc::internal::CallbackServerStreamingHandler<Request, Response>>(
      [service, method](grpc::CallbackServerContext* context, const Request* request) {
        return (service->*method)(context, request);
      });
  // A streaming handler destroys its request itself when decoding fails.
  return new CheckedRequestHandler(std::move(inner), *Request::descriptor(), [](void*) {});
}

}  // namespace stoke::server
