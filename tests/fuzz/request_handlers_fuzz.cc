// libFuzzer target: the coordinator's request handlers, called over gRPC on loopback in
// this process, with the real core and a SQLite store in a temp folder. The first byte
// picks the method, the rest is its request. Whatever arrives, the answer is OK or a
// refusal that says what was wrong (never INTERNAL or UNKNOWN, never an empty message),
// and the coordinator keeps answering. Bytes that are no encoding of the request are sent
// as they are, and must be refused as INVALID_ARGUMENT with a reason.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include <grpcpp/generic/generic_stub.h>
#include <spdlog/spdlog.h>

#include <condition_variable>
#include <mutex>

#include "tests/support/in_process_coordinator.h"

namespace {

using stoke::v1::Coordinator;

struct Target {
  stoke::testing::InProcessCoordinator coordinator;
  std::unique_ptr<Coordinator::Stub> stub = coordinator.Stub();
  std::shared_ptr<grpc::Channel> channel =
      grpc::CreateChannel(coordinator.address(), grpc::InsecureChannelCredentials());
  grpc::GenericStub generic{channel};
};

Target& Get() {
  static Target* target = [] {
    spdlog::set_level(spdlog::level::warn);  // a line per submitted job drowns the fuzzer's
    return new Target();                     // lives for the whole run
  }();
  return *target;
}

// `bytes` sent as the request of `method` as they are, through the generic stub.
grpc::Status CallRaw(const std::string& method, const std::string& bytes) {
  grpc::Slice slice(bytes);
  grpc::ByteBuffer request(&slice, 1), response;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  grpc::Status status;
  Get().generic.UnaryCall(&context, "/stoke.v1.Coordinator/" + method, grpc::StubOptions(),
                          &request, &response, [&](grpc::Status s) {
                            std::lock_guard<std::mutex> lock(mu);
                            status = std::move(s);
                            done = true;
                            cv.notify_one();
                          });
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return done; });
  return status;
}

template <typename Request, typename Response>
grpc::Status Call(const std::string& name,
                  grpc::Status (Coordinator::Stub::*method)(grpc::ClientContext*, const Request&,
                                                            Response*),
                  const std::string& bytes, bool* parsed) {
  Request request;
  *parsed = request.ParseFromString(bytes);
  if (!*parsed) return CallRaw(name, bytes);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  Response response;
  return (Get().stub.get()->*method)(&context, request, &response);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  bool parsed = false;
  grpc::Status status;
  switch (data[0] % 7) {
    case 0:
      status = Call("SubmitJob", &Coordinator::Stub::SubmitJob, bytes, &parsed);
      break;
    case 1:
      status = Call("GetJob", &Coordinator::Stub::GetJob, bytes, &parsed);
      break;
    case 2:
      status = Call("ListJobs", &Coordinator::Stub::ListJobs, bytes, &parsed);
      break;
    case 3:
      status = Call("CancelJob", &Coordinator::Stub::CancelJob, bytes, &parsed);
      break;
    case 4:
      status = Call("ListCheckpoints", &Coordinator::Stub::ListCheckpoints, bytes, &parsed);
      break;
    case 5:
      status = Call("ListAudit", &Coordinator::Stub::ListAudit, bytes, &parsed);
      break;
    default:
      status = Call("GetCluster", &Coordinator::Stub::GetCluster, bytes, &parsed);
  }
  const auto code = status.error_code();
  if (!parsed) {
    if (code != grpc::StatusCode::INVALID_ARGUMENT || status.error_message().empty()) {
      __builtin_trap();
    }
    return 0;
  }
  if (code == grpc::StatusCode::INTERNAL || code == grpc::StatusCode::UNKNOWN ||
      code == grpc::StatusCode::DEADLINE_EXCEEDED || code == grpc::StatusCode::UNAVAILABLE) {
    __builtin_trap();
  }
  if (!status.ok() && status.error_message().empty()) __builtin_trap();
  return 0;
}
