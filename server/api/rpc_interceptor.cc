#include "server/api/rpc_interceptor.h"

#include <google/protobuf/descriptor.h>

#include "absl/strings/string_view.h"

#include <chrono>
#include <string>

namespace stoke::server {
namespace {

using grpc::experimental::InterceptionHookPoints;

const char* CodeName(grpc::StatusCode code) {
  switch (code) {
    case grpc::OK:
      return "OK";
    case grpc::CANCELLED:
      return "CANCELLED";
    case grpc::UNKNOWN:
      return "UNKNOWN";
    case grpc::INVALID_ARGUMENT:
      return "INVALID_ARGUMENT";
    case grpc::DEADLINE_EXCEEDED:
      return "DEADLINE_EXCEEDED";
    case grpc::NOT_FOUND:
      return "NOT_FOUND";
    case grpc::ALREADY_EXISTS:
      return "ALREADY_EXISTS";
    case grpc::PERMISSION_DENIED:
      return "PERMISSION_DENIED";
    case grpc::RESOURCE_EXHAUSTED:
      return "RESOURCE_EXHAUSTED";
    case grpc::FAILED_PRECONDITION:
      return "FAILED_PRECONDITION";
    case grpc::ABORTED:
      return "ABORTED";
    case grpc::OUT_OF_RANGE:
      return "OUT_OF_RANGE";
    case grpc::UNIMPLEMENTED:
      return "UNIMPLEMENTED";
    case grpc::INTERNAL:
      return "INTERNAL";
    case grpc::UNAVAILABLE:
      return "UNAVAILABLE";
    case grpc::DATA_LOSS:
      return "DATA_LOSS";
    case grpc::UNAUTHENTICATED:
      return "UNAUTHENTICATED";
    default:
      return "UNKNOWN";
  }
}

// Metric labels must stay bounded, and a client can name any method it likes: only
// methods of services compiled into this binary (ours, reflection) and the health
// service keep their name; everything else is counted as "unknown".
std::string MethodLabel(const char* method) {
  if (method == nullptr) return "unknown";
  const absl::string_view name(method);
  static const char* const kHealth[] = {"/grpc.health.v1.Health/Check",
                                        "/grpc.health.v1.Health/Watch",
                                        "/grpc.health.v1.Health/List"};
  for (const char* known : kHealth) {
    if (name == known) return std::string(name);
  }
  const auto slash = name.rfind('/');
  if (name.size() > 256 || name.empty() || name[0] != '/' || slash == 0 ||
      slash == absl::string_view::npos) {
    return "unknown";
  }
  const auto* service = google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(
      std::string(name.substr(1, slash - 1)));
  if (service == nullptr ||
      service->FindMethodByName(std::string(name.substr(slash + 1))) == nullptr) {
    return "unknown";
  }
  return std::string(name);
}

class RpcInterceptor final : public grpc::experimental::Interceptor {
 public:
  RpcInterceptor(grpc::experimental::ServerRpcInfo* info, RpcObserver& observer)
      : observer_(observer),
        method_(MethodLabel(info->method())),
        unary_(info->type() == grpc::experimental::ServerRpcInfo::Type::UNARY),
        start_(std::chrono::steady_clock::now()) {
    if (!unary_) observer_.OnStreamOpened(method_);
  }

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_STATUS)) {
      const std::string code = CodeName(methods->GetSendStatus().error_code());
      if (unary_) {
        observer_.OnUnaryFinished(
            method_, code,
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count());
      } else {
        observer_.OnStreamFinished(method_, code);
      }
    }
    methods->Proceed();
  }

 private:
  RpcObserver& observer_;
  std::string method_;
  bool unary_;
  std::chrono::steady_clock::time_point start_;
};

class RpcInterceptorFactory final : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit RpcInterceptorFactory(RpcObserver& observer) : observer_(observer) {}
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    return new RpcInterceptor(info, observer_);
  }

 private:
  RpcObserver& observer_;
};

}  // namespace

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> MakeRpcInterceptorFactory(
    RpcObserver& observer) {
  return std::make_unique<RpcInterceptorFactory>(observer);
}

}  // namespace stoke::server
