#include "tests/support/simulated_worker.h"

namespace stoke::testing {

SimulatedWorker::SimulatedWorker(v1::WorkerLink::Stub& stub, std::string id, bool finishes)
    : stub_(stub), id_(std::move(id)), finishes_(finishes) {}

SimulatedWorker::~SimulatedWorker() {
  bool started;
  {
    std::lock_guard<std::mutex> lock(mu_);
    started = started_;
  }
  if (started) {
    context_.TryCancel();
    Await();
  }
}

void SimulatedWorker::Attach() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    started_ = true;
  }
  stub_.async()->Attach(&context_, this);
  StartRead(&incoming_);
  v1::WorkerMessage reg;
  reg.mutable_register_()->set_worker_id(id_);
  reg.mutable_register_()->set_host("simulated");
  reg.mutable_register_()->mutable_device()->set_type(v1::DEVICE_TYPE_CPU);
  reg.mutable_register_()->set_version("simulated");
  Send(std::move(reg));
  StartCall();
}

void SimulatedWorker::Detach(bool gracefully) {
  if (!gracefully) {
    context_.TryCancel();
    return;
  }
  v1::WorkerMessage leaving;
  leaving.mutable_leaving()->set_reason("simulated shutdown");
  Send(std::move(leaving));
  std::lock_guard<std::mutex> lock(mu_);
  closing_ = true;
  if (writes_.idle() && !writes_done_sent_) {
    writes_done_sent_ = true;
    StartWritesDone();
  }
}

grpc::Status SimulatedWorker::Await() {
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [this] { return done_; });
  return status_;
}

bool SimulatedWorker::registered() const {
  std::lock_guard<std::mutex> lock(mu_);
  return registered_;
}

int SimulatedWorker::assignments() const {
  std::lock_guard<std::mutex> lock(mu_);
  return assignments_;
}

void SimulatedWorker::Send(v1::WorkerMessage message) {
  std::lock_guard<std::mutex> lock(mu_);
  if (closing_ || done_) return;
  if (const v1::WorkerMessage* next = writes_.Push(std::move(message))) StartWrite(next);
}

void SimulatedWorker::OnWriteDone(bool ok) {
  std::lock_guard<std::mutex> lock(mu_);
  const v1::WorkerMessage* next = writes_.Done(ok);
  if (!ok) return;
  if (next != nullptr) {
    StartWrite(next);
  } else if (closing_ && !writes_done_sent_) {
    writes_done_sent_ = true;
    StartWritesDone();
  }
}

void SimulatedWorker::OnReadDone(bool ok) {
  if (!ok) return;  // the coordinator ended the stream; OnDone follows
  Handle(incoming_);
  StartRead(&incoming_);
}

void SimulatedWorker::Handle(const v1::CoordinatorMessage& message) {
  if (message.has_registered()) {
    std::lock_guard<std::mutex> lock(mu_);
    registered_ = true;
  } else if (message.has_assignment()) {
    const v1::Assignment& a = message.assignment();
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++assignments_;
    }
    v1::WorkerMessage started;
    started.mutable_started()->set_job_id(a.job_id());
    started.mutable_started()->set_attempt(a.attempt());
    Send(std::move(started));
    if (!finishes_) return;
    v1::WorkerMessage report;
    report.mutable_report()->set_job_id(a.job_id());
    report.mutable_report()->set_attempt(a.attempt());
    v1::MetricSample* sample = report.mutable_report()->add_metrics();
    sample->set_step(1);
    sample->set_total_steps(1);
    sample->set_loss(1.0);
    Send(std::move(report));
    v1::WorkerMessage finished;
    finished.mutable_finished()->set_job_id(a.job_id());
    finished.mutable_finished()->set_attempt(a.attempt());
    finished.mutable_finished()->set_outcome(v1::TASK_OUTCOME_SUCCEEDED);
    Send(std::move(finished));
  } else if (message.has_cancel()) {
    v1::WorkerMessage finished;
    finished.mutable_finished()->set_job_id(message.cancel().job_id());
    finished.mutable_finished()->set_attempt(message.cancel().attempt());
    finished.mutable_finished()->set_outcome(v1::TASK_OUTCOME_CANCELLED);
    finished.mutable_finished()->set_message("cancelled");
    Send(std::move(finished));
  }
}

void SimulatedWorker::OnDone(const grpc::Status& status) {
  std::lock_guard<std::mutex> lock(mu_);
  done_ = true;
  status_ = status;
  done_cv_.notify_all();
}

}  // namespace stoke::testing
