// A worker as the coordinator sees one: a WorkerLink stream over real gRPC (the callback
// API, so hundreds need no threads) that registers a CPU device, starts what it is
// assigned, and confirms cancels. It trains nothing: `finishes` says whether it reports
// its tasks succeeded at once, or holds them until it is detached.
#pragma once

#include <grpcpp/grpcpp.h>

#include <condition_variable>
#include <mutex>
#include <string>

#include "client/lib/serial_writes.h"
#include "stoke/v1/worker_link.grpc.pb.h"

namespace stoke::testing {

class SimulatedWorker final
    : public grpc::ClientBidiReactor<v1::WorkerMessage, v1::CoordinatorMessage> {
 public:
  SimulatedWorker(v1::WorkerLink::Stub& stub, std::string id, bool finishes);
  ~SimulatedWorker() override;
  SimulatedWorker(const SimulatedWorker&) = delete;
  SimulatedWorker& operator=(const SimulatedWorker&) = delete;

  // Opens the stream and registers.
  void Attach();
  // Leaves as stoke-worker does on SIGTERM (Leaving, then the end of its writes), or
  // drops the connection as a killed process does.
  void Detach(bool gracefully);
  // Waits until the stream has ended; its status.
  grpc::Status Await();

  bool registered() const;
  int assignments() const;

  void OnReadDone(bool ok) override;
  void OnWriteDone(bool ok) override;
  void OnDone(const grpc::Status& status) override;

 private:
  void Send(v1::WorkerMessage message);
  void Handle(const v1::CoordinatorMessage& message);

  v1::WorkerLink::Stub& stub_;
  const std::string id_;
  const bool finishes_;
  grpc::ClientContext context_;
  v1::CoordinatorMessage incoming_;

  mutable std::mutex mu_;
  std::condition_variable done_cv_;
  client::SerialWrites<v1::WorkerMessage> writes_;
  bool closing_ = false;  // no more messages; end the writes once the outbox drains
  bool writes_done_sent_ = false;
  bool registered_ = false;
  int assignments_ = 0;
  bool started_ = false;
  bool done_ = false;
  grpc::Status status_;
};

}  // namespace stoke::testing
