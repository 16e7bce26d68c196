// The coordinator core's handle on one attached worker. The API layer implements it over
// the worker's gRPC stream; the core only queues messages on it and never waits.
#pragma once

#include <string>

#include "stoke/v1/worker_link.pb.h"

namespace stoke::server {

class WorkerConnection {
 public:
  virtual ~WorkerConnection() = default;
  // Queues a message for the worker; never blocks.
  virtual void Send(const v1::CoordinatorMessage& message) = 0;
  // Ends the stream (the worker will reconnect); never blocks.
  virtual void Close(const std::string& reason) = 0;
};

}  // namespace stoke::server
