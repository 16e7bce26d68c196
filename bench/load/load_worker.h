// A simulated worker for the load tool: one WorkerLink stream over real gRPC (the callback
// API, so dozens need no threads of their own) that registers a CPU device, heartbeats at
// the interval the coordinator asks for, and "trains" each assignment for a set time while
// reporting numbered metric samples and log lines as often as stoke-worker flushes its
// outbox (every 200 ms). It trains nothing: the coordinator cannot tell it from a worker
// whose job reports every flush, which is what loads it.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>

#include "client/lib/serial_writes.h"
#include "stoke/v1/worker_link.grpc.pb.h"

namespace stoke::load {

class LoadWorker final : public grpc::ClientBidiReactor<v1::WorkerMessage, v1::CoordinatorMessage> {
 public:
  using Clock = std::chrono::steady_clock;
  struct Options {
    // How long each assigned job "trains" before it is reported succeeded.
    std::chrono::milliseconds job_length{500};
    // Between reports (stoke-worker's outbox flush interval).
    std::chrono::milliseconds report_interval{200};
    // Metric samples in each report, and a log line every this many reports (0: none).
    int samples_per_report = 1;
    int log_every_reports = 5;
  };
  struct Counts {
    uint64_t assignments = 0;
    uint64_t finished = 0;
    uint64_t reports = 0;
    uint64_t samples = 0;
    uint64_t heartbeats = 0;
  };

  LoadWorker(v1::WorkerLink::Stub& stub, std::string id, Options options);
  ~LoadWorker() override;
  LoadWorker(const LoadWorker&) = delete;
  LoadWorker& operator=(const LoadWorker&) = delete;

  // Opens the stream and registers.
  void Attach();
  // Sends what is due at `now`: a heartbeat, a report, the end of the job it holds. The
  // load tool calls it every few milliseconds for every worker.
  void Tick(Clock::time_point now);
  // Drops the connection, as a killed process does, and waits for the stream to end.
  void Detach();

  bool registered() const;
  // The stream has ended (the coordinator closed it, or Detach).
  bool done() const;
  Counts counts() const;

  void OnReadDone(bool ok) override;
  void OnWriteDone(bool ok) override;
  void OnDone(const grpc::Status& status) override;

 private:
  struct Task {
    std::string job_id;
    uint32_t attempt = 0;
    Clock::time_point ends;
    Clock::time_point next_report;
    uint64_t step = 0;
  };

  // Queues a message behind the one being written; callers hold mu_.
  void SendLocked(v1::WorkerMessage message);
  void Handle(const v1::CoordinatorMessage& message);
  v1::WorkerMessage ReportLocked(Task& task, bool last);

  v1::WorkerLink::Stub& stub_;
  const std::string id_;
  const Options options_;
  grpc::ClientContext context_;
  v1::CoordinatorMessage incoming_;

  mutable std::mutex mu_;
  std::condition_variable done_cv_;
  client::SerialWrites<v1::WorkerMessage> writes_;
  bool started_ = false;
  bool registered_ = false;
  bool done_ = false;
  std::chrono::milliseconds heartbeat_interval_{2000};
  Clock::time_point next_heartbeat_;
  std::optional<Task> task_;  // one at a time, as a real worker
  uint64_t report_seq_ = 0;
  Counts counts_;
};

}  // namespace stoke::load
