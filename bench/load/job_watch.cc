#include "bench/load/job_watch.h"

#include <utility>

namespace stoke::load {

JobWatch::JobWatch(v1::Coordinator::Stub& stub, std::string job_id)
    : stub_(stub), job_id_(std::move(job_id)) {}

JobWatch::~JobWatch() { Cancel(); }

void JobWatch::Start() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    started_ = true;
  }
  request_.set_id(job_id_);
  request_.set_from_seq(1);
  stub_.async()->WatchJob(&context_, &request_, this);
  StartRead(&event_);
  StartCall();
}

void JobWatch::Cancel() {
  std::unique_lock<std::mutex> lock(mu_);
  if (!started_) return;
  context_.TryCancel();
  done_cv_.wait(lock, [this] { return done_; });
}

bool JobWatch::done() const {
  std::lock_guard<std::mutex> lock(mu_);
  return done_;
}

bool JobWatch::finished() const {
  std::lock_guard<std::mutex> lock(mu_);
  return done_ && status_.ok();
}

std::string JobWatch::error() const {
  std::lock_guard<std::mutex> lock(mu_);
  // Cancel() ends streams with CANCELLED: not an error of the coordinator's.
  if (status_.ok() || status_.error_code() == grpc::StatusCode::CANCELLED) return "";
  return status_.error_message();
}

std::vector<JobWatch::Received> JobWatch::received() const {
  std::lock_guard<std::mutex> lock(mu_);
  return received_;
}

void JobWatch::OnReadDone(bool ok) {
  if (!ok) return;  // the stream ended; OnDone follows
  {
    std::lock_guard<std::mutex> lock(mu_);
    received_.push_back({event_.seq(), event_.has_state_change()});
  }
  StartRead(&event_);
}

void JobWatch::OnDone(const grpc::Status& status) {
  std::lock_guard<std::mutex> lock(mu_);
  done_ = true;
  status_ = status;
  done_cv_.notify_all();
}

}  // namespace stoke::load
