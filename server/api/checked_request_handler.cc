#include "server/api/checked_request_handler.h"

#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/slice.h>

#include <new>
#include <string>
#include <utility>

#include "server/api/unparsable_request.h"

namespace stoke::server {
namespace {

// What this handler keeps for one call, in the call's arena (freed with the call, so it
// holds nothing that needs destroying).
struct CallState {
  bool refused = false;
  void* inner_data = nullptr;  // the handler data of the handler the call goes to
};

// The bytes of `buffer` (decompressed if need be); destroys it.
std::string TakeBytes(grpc_byte_buffer* buffer) {
  std::string bytes;
  if (buffer == nullptr) return bytes;
  grpc_byte_buffer_reader reader;
  if (grpc_byte_buffer_reader_init(&reader, buffer)) {
    grpc_slice all = grpc_byte_buffer_reader_readall(&reader);
    bytes.assign(reinterpret_cast<const char*>(GRPC_SLICE_START_PTR(all)), GRPC_SLICE_LENGTH(all));
    grpc_slice_unref(all);
    grpc_byte_buffer_reader_destroy(&reader);
  }
  grpc_byte_buffer_destroy(buffer);
  return bytes;
}

grpc_byte_buffer* BufferOf(const std::string& bytes) {
  grpc_slice slice = grpc_slice_from_copied_buffer(bytes.data(), bytes.size());
  grpc_byte_buffer* buffer = grpc_raw_byte_buffer_create(&slice, 1);
  grpc_slice_unref(slice);
  return buffer;
}

}  // namespace

CheckedRequestHandler::CheckedRequestHandler(std::unique_ptr<grpc::internal::MethodHandler> inner,
                                             const google::protobuf::Descriptor& request_type,
                                             std::function<void(void*)> discard)
    : inner_(std::move(inner)),
      request_type_(request_type),
      discard_(std::move(discard)),
      refusal_([](grpc::CallbackServerContext* context, const google::protobuf::StringValue* reason,
                  grpc::ByteBuffer*) {
        grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
        reactor->Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, reason->value()));
        return reactor;
      }) {}

void* CheckedRequestHandler::Deserialize(grpc_call* call, grpc_byte_buffer* request,
                                         grpc::Status* status, void** handler_data) {
  auto* state = new (grpc_call_arena_alloc(call, sizeof(CallState))) CallState();
  *handler_data = state;
  google::protobuf::StringValue reason;
  if (request == nullptr) {
    reason.set_value("request: missing");
  } else {
    // gRPC's decoding consumes the buffer; a copy shares its slices, not their bytes.
    grpc_byte_buffer* copy = grpc_byte_buffer_copy(request);
    void* decoded = inner_->Deserialize(call, request, status, &state->inner_data);
    if (status->ok()) {
      grpc_byte_buffer_destroy(copy);
      return decoded;
    }
    discard_(state->inner_data);
    state->inner_data = nullptr;
    reason.set_value(DescribeUnparsable(request_type_, TakeBytes(copy)));
  }
  state->refused = true;
  return refusal_.Deserialize(call, BufferOf(reason.SerializeAsString()), status,
                              &state->inner_data);
}

void CheckedRequestHandler::RunHandler(const HandlerParameter& param) {
  auto* state = static_cast<CallState*>(param.internal_data);
  // Without a state, Deserialize never ran (no request came): the inner handler decides.
  if (state == nullptr) {
    inner_->RunHandler(param);
    return;
  }
  const HandlerParameter forwarded(param.call, param.server_context, param.request, param.status,
                                   state->inner_data, param.call_requester);
  if (state->refused) {
    refusal_.RunHandler(forwarded);
  } else {
    inner_->RunHandler(forwarded);
  }
}

}  // namespace stoke::server
