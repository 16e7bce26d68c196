// One WatchJob stream of the load tool (callback API: hundreds need no threads): it keeps
// the sequence number and kind of every event it receives, so that afterwards they can be
// compared with the events the store holds for the job.
#pragma once

#include <grpcpp/grpcpp.h>

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "stoke/v1/coordinator.grpc.pb.h"

namespace stoke::load {

class JobWatch final : public grpc::ClientReadReactor<v1::JobEvent> {
 public:
  struct Received {
    uint64_t seq = 0;
    bool state_change = false;
  };

  JobWatch(v1::Coordinator::Stub& stub, std::string job_id);
  ~JobWatch() override;
  JobWatch(const JobWatch&) = delete;
  JobWatch& operator=(const JobWatch&) = delete;

  // Watches from the job's first event.
  void Start();
  // Ends the stream early (the load is over) and waits for it to end.
  void Cancel();

  const std::string& job_id() const { return job_id_; }
  // The stream has ended; `finished`: by the coordinator, the job over and every event sent.
  bool done() const;
  bool finished() const;
  // Why the stream failed; "" when it did not (or was cancelled by Cancel()).
  std::string error() const;
  std::vector<Received> received() const;

  void OnReadDone(bool ok) override;
  void OnDone(const grpc::Status& status) override;

 private:
  v1::Coordinator::Stub& stub_;
  const std::string job_id_;
  grpc::ClientContext context_;
  v1::WatchJobRequest request_;
  v1::JobEvent event_;

  mutable std::mutex mu_;
  std::condition_variable done_cv_;
  bool started_ = false;
  bool done_ = false;
  grpc::Status status_;
  std::vector<Received> received_;
};

}  // namespace stoke::load
