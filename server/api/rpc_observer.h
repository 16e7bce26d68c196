// What the gRPC server tells whoever counts calls (the Prometheus exporter): every call's
// method and status code, unary calls' latency, and streams as they open and close.
// Called on gRPC's threads: implementations must be quick and thread-safe.
#pragma once

#include <string>

namespace stoke::server {

class RpcObserver {
 public:
  virtual ~RpcObserver() = default;
  // `method`: "/stoke.v1.Coordinator/SubmitJob"; `code`: "OK", "INVALID_ARGUMENT", ...
  virtual void OnUnaryFinished(const std::string& method, const std::string& code,
                               double seconds) = 0;
  virtual void OnStreamOpened(const std::string& method) = 0;
  virtual void OnStreamFinished(const std::string& method, const std::string& code) = 0;
};

}  // namespace stoke::server
