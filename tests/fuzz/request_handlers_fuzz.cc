// libFuzzer target: the coordinator's request handlers, called over gRPC on loopback in
// this process, with the real core and a SQLite store in a temp folder. The first byte
// picks the method, the rest is its request. Whatever arrives, the answer is OK or a
// refusal that says what was wrong (never INTERNAL or UNKNOWN, never an empty message),
// and the coordinator keeps answering.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include <spdlog/spdlog.h>

#include "tests/support/in_process_coordinator.h"

namespace {

using stoke::v1::Coordinator;

struct Target {
  stoke::testing::InProcessCoordinator coordinator;
  std::unique_ptr<Coordinator::Stub> stub = coordinator.Stub();
};

Target& Get() {
  static Target* target = [] {
    spdlog::set_level(spdlog::level::warn);  // a line per submitted job drowns the fuzzer's
    return new Target();                     // lives for the whole run
  }();
  return *target;
}

template <typename Request, typename Response>
grpc::Status Call(grpc::Status (Coordinator::Stub::*method)(grpc::ClientContext*, const Request&,
                                                            Response*),
                  const std::string& bytes, bool* parsed) {
  Request request;
  *parsed = request.ParseFromString(bytes);
  if (!*parsed) return grpc::Status::OK;
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
      status = Call(&Coordinator::Stub::SubmitJob, bytes, &parsed);
      break;
    case 1:
      status = Call(&Coordinator::Stub::GetJob, bytes, &parsed);
      break;
    case 2:
      status = Call(&Coordinator::Stub::ListJobs, bytes, &parsed);
      break;
    case 3:
      status = Call(&Coordinator::Stub::CancelJob, bytes, &parsed);
      break;
    case 4:
      status = Call(&Coordinator::Stub::ListCheckpoints, bytes, &parsed);
      break;
    case 5:
      status = Call(&Coordinator::Stub::ListAudit, bytes, &parsed);
      break;
    default:
      status = Call(&Coordinator::Stub::GetCluster, bytes, &parsed);
  }
  if (!parsed) return 0;
  const auto code = status.error_code();
  if (code == grpc::StatusCode::INTERNAL || code == grpc::StatusCode::UNKNOWN ||
      code == grpc::StatusCode::DEADLINE_EXCEEDED || code == grpc::StatusCode::UNAVAILABLE) {
    __builtin_trap();
  }
  if (!status.ok() && status.error_message().empty()) __builtin_trap();
  return 0;
}
