// One WatchJob stream. It pulls events from the hub from its own position, one batch at a
// time, and writes them one by one; when it has nothing to send it waits for the hub to
// say more has arrived. A client that stops reading stalls only its own stream: no
// buffer grows, the job and the other watchers go on.
#pragma once

#include <grpcpp/grpcpp.h>

#include <deque>
#include <memory>
#include <mutex>
#include <string>

#include "server/api/executor.h"
#include "server/api/stream_quota.h"
#include "server/core/event_hub.h"
#include "stoke/v1/job.pb.h"

namespace stoke::server {

class WatchReactor final : public grpc::ServerWriteReactor<v1::JobEvent> {
 public:
  // The reactor owns itself and is deleted when gRPC is done with it.
  // `include_logs` false: log lines are left out (a caller who does not own the job sees
  // its state changes and metrics only).
  // `lease`: the caller's place in the stream quota, given back when the stream is done.
  static WatchReactor* Start(EventHub& hub, Executor& executor, std::string job_id,
                             uint64_t from_seq, bool include_logs = true,
                             std::unique_ptr<StreamQuota::Lease> lease = nullptr);
  // A stream that ends at once with `status`.
  static WatchReactor* Fail(EventHub& hub, Executor& executor, grpc::Status status);

  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

 private:
  WatchReactor(EventHub& hub, Executor& executor, std::string job_id, uint64_t from_seq,
               bool include_logs);

  // Asks for a read from the hub on the executor, unless one is running or a write is out.
  void Wake();
  // Runs on the executor.
  void Fill();
  // With mu_ held: starts the next write, finishes, or goes idle. Returns true if the
  // reactor should call Finish(finish_status_) once mu_ is released.
  bool AdvanceLocked();
  void FinishOnce(grpc::Status status);

  EventHub& hub_;
  Executor& executor_;
  const std::string job_id_;
  const bool include_logs_;
  uint64_t subscription_ = 0;
  std::unique_ptr<StreamQuota::Lease> lease_;

  std::mutex mu_;
  uint64_t next_seq_;
  std::deque<v1::JobEvent> buffer_;
  v1::JobEvent current_;        // the event being written; must outlive the write
  bool end_of_stream_ = false;  // the hub said the buffer holds the job's last events
  bool filling_ = false;        // a Fill is queued or running
  bool wake_pending_ = false;   // new events arrived while busy
  bool writing_ = false;
  bool cancelled_ = false;  // OnCancel has run
  bool finished_ = false;   // Finish has been called
  bool done_ = false;       // OnDone has run; delete when no Fill is in flight
};

}  // namespace stoke::server
