// A worker as the coordinator sees one, for the load tool and the tests: one WorkerLink
// stream over real gRPC (the callback API, so hundreds need no threads of their own) that
// registers a CPU device, starts what it is assigned and confirms cancels. It trains
// nothing. What it does with an assignment is its Options': report it succeeded at once,
// hold it until cancelled or detached, or "train" it for a set time while reporting
// numbered metric samples and log lines as often as stoke-worker flushes its outbox (the
// load tool's case: the coordinator cannot tell it from a worker whose job reports every
// flush, which is what loads it). Heartbeats and timed reports are sent by Tick.
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

class SimulatedWorker final
    : public grpc::ClientBidiReactor<v1::WorkerMessage, v1::CoordinatorMessage> {
 public:
  using Clock = std::chrono::steady_clock;
  struct Options {
    std::string host = "simulated";
    // A join token, sent as stoke-worker sends it; empty: none.
    std::string token;
    // How long each assigned job "trains" before it is reported succeeded (with Tick): zero
    // reports it at once, on assignment; nullopt holds it until it is cancelled, preempted or the
    // worker detaches.
    std::optional<std::chrono::milliseconds> job_length = std::chrono::milliseconds(0);
    // > 0: each job instead trains its spec's training.steps at this many seconds a step,
    // reporting its true step, total and step time (for start-time predictions).
    double seconds_per_step = 0;
    // Between reports (stoke-worker's outbox flush interval).
    std::chrono::milliseconds report_interval{200};
    // Metric samples in each report, and a log line every this many reports (0: none).
    int samples_per_report = 1;
    int log_every_reports = 5;
  };
  struct Counts {
    uint64_t assignments = 0;
    uint64_t finished = 0;
    uint64_t preempted = 0;
    uint64_t reports = 0;
    uint64_t samples = 0;
    uint64_t heartbeats = 0;
  };

  SimulatedWorker(v1::WorkerLink::Stub& stub, std::string id, Options options);
  // Drops the connection if it is still open, and waits for the stream to end.
  ~SimulatedWorker() override;
  SimulatedWorker(const SimulatedWorker&) = delete;
  SimulatedWorker& operator=(const SimulatedWorker&) = delete;

  // Opens the stream and registers.
  void Attach();
  // Sends what is due at `now`: a heartbeat, a report, the end of a timed job. The load
  // tool calls it every few milliseconds for every worker; tests need not.
  void Tick(Clock::time_point now);
  // Leaves as stoke-worker does on SIGTERM (Leaving, then the end of its writes), or
  // drops the connection as a killed process does. Returns at once: Await waits.
  void Detach(bool gracefully);
  // Waits until the stream has ended; its status.
  grpc::Status Await();

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
    std::optional<Clock::time_point> ends;  // nullopt: held
    Clock::time_point next_report;
    uint64_t step = 0;
    uint64_t total_steps = 0;  // with seconds_per_step
    Clock::time_point began;
  };

  // Queues a message behind the one being written; callers hold mu_.
  void SendLocked(v1::WorkerMessage message);
  void Handle(const v1::CoordinatorMessage& message);
  v1::WorkerMessage ReportLocked(Task& task, bool last);
  // Reports `task` done: a last report, then TaskFinished SUCCEEDED.
  void FinishLocked(Task& task);

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
  bool closing_ = false;  // no more messages; end the writes once the outbox drains
  bool writes_done_sent_ = false;
  bool done_ = false;
  grpc::Status status_;
  std::chrono::milliseconds heartbeat_interval_{2000};
  Clock::time_point next_heartbeat_;
  std::optional<Task> task_;  // one at a time, as a real worker
  uint64_t report_seq_ = 0;
  Counts counts_;
};

}  // namespace stoke::load
