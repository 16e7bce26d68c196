#include "bench/load/load_worker.h"

#include <utility>

namespace stoke::load {

LoadWorker::LoadWorker(v1::WorkerLink::Stub& stub, std::string id, Options options)
    : stub_(stub), id_(std::move(id)), options_(options) {}

LoadWorker::~LoadWorker() { Detach(); }

void LoadWorker::Attach() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    started_ = true;
    stub_.async()->Attach(&context_, this);
    StartRead(&incoming_);
    v1::WorkerMessage reg;
    reg.mutable_register_()->set_worker_id(id_);
    reg.mutable_register_()->set_host("load-host");
    reg.mutable_register_()->mutable_device()->set_type(v1::DEVICE_TYPE_CPU);
    reg.mutable_register_()->set_version("stoke-load");
    SendLocked(std::move(reg));
  }
  StartCall();
}

void LoadWorker::Detach() {
  std::unique_lock<std::mutex> lock(mu_);
  if (!started_) return;
  context_.TryCancel();
  done_cv_.wait(lock, [this] { return done_; });
}

bool LoadWorker::registered() const {
  std::lock_guard<std::mutex> lock(mu_);
  return registered_;
}

bool LoadWorker::done() const {
  std::lock_guard<std::mutex> lock(mu_);
  return done_;
}

LoadWorker::Counts LoadWorker::counts() const {
  std::lock_guard<std::mutex> lock(mu_);
  return counts_;
}

void LoadWorker::SendLocked(v1::WorkerMessage message) {
  if (done_) return;
  if (const v1::WorkerMessage* next = writes_.Push(std::move(message))) StartWrite(next);
}

void LoadWorker::OnWriteDone(bool ok) {
  std::lock_guard<std::mutex> lock(mu_);
  if (const v1::WorkerMessage* next = writes_.Done(ok)) StartWrite(next);
}

void LoadWorker::OnReadDone(bool ok) {
  if (!ok) return;  // the stream ended; OnDone follows
  Handle(incoming_);
  StartRead(&incoming_);
}

void LoadWorker::Handle(const v1::CoordinatorMessage& message) {
  std::lock_guard<std::mutex> lock(mu_);
  const Clock::time_point now = Clock::now();
  if (message.has_registered()) {
    registered_ = true;
    if (message.registered().heartbeat_interval_ms() > 0) {
      heartbeat_interval_ = std::chrono::milliseconds(message.registered().heartbeat_interval_ms());
    }
    next_heartbeat_ = now + heartbeat_interval_;
  } else if (message.has_assignment()) {
    const v1::Assignment& a = message.assignment();
    ++counts_.assignments;
    task_ =
        Task{a.job_id(), a.attempt(), now + options_.job_length, now + options_.report_interval, 0};
    v1::WorkerMessage started;
    started.mutable_started()->set_job_id(a.job_id());
    started.mutable_started()->set_attempt(a.attempt());
    SendLocked(std::move(started));
  } else if (message.has_cancel()) {
    if (task_ && task_->job_id == message.cancel().job_id()) task_.reset();
    v1::WorkerMessage finished;
    finished.mutable_finished()->set_job_id(message.cancel().job_id());
    finished.mutable_finished()->set_attempt(message.cancel().attempt());
    finished.mutable_finished()->set_outcome(v1::TASK_OUTCOME_CANCELLED);
    finished.mutable_finished()->set_message("cancelled");
    SendLocked(std::move(finished));
  }
}

v1::WorkerMessage LoadWorker::ReportLocked(Task& task, bool last) {
  v1::WorkerMessage message;
  v1::TaskReport* report = message.mutable_report();
  report->set_job_id(task.job_id);
  report->set_attempt(task.attempt);
  report->set_report_seq(++report_seq_);
  // What a small CPU job's window looks like: enough fields for the diagnoses to run.
  for (int i = 0; i < options_.samples_per_report; ++i) {
    v1::MetricSample* sample = report->add_metrics();
    task.step += 50;
    sample->set_step(task.step);
    sample->set_total_steps(last ? task.step : task.step * 10);
    sample->set_loss(2.0 / static_cast<double>(1 + task.step / 50));
    sample->set_learning_rate(1e-3);
    sample->set_samples_per_second(25'000);
    sample->set_step_seconds(0.004);
    sample->set_data_wait_ratio(0.02);
  }
  ++counts_.reports;
  counts_.samples += static_cast<uint64_t>(options_.samples_per_report);
  if (options_.log_every_reports > 0 && counts_.reports % options_.log_every_reports == 0) {
    report->add_logs()->set_text("step " + std::to_string(task.step) + ": loss falling");
  }
  return message;
}

void LoadWorker::Tick(Clock::time_point now) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!registered_ || done_) return;
  if (now >= next_heartbeat_) {
    v1::WorkerMessage beat;
    beat.mutable_heartbeat();
    SendLocked(std::move(beat));
    ++counts_.heartbeats;
    next_heartbeat_ = now + heartbeat_interval_;
  }
  if (!task_) return;
  if (now >= task_->ends) {
    SendLocked(ReportLocked(*task_, /*last=*/true));
    v1::WorkerMessage finished;
    finished.mutable_finished()->set_job_id(task_->job_id);
    finished.mutable_finished()->set_attempt(task_->attempt);
    finished.mutable_finished()->set_outcome(v1::TASK_OUTCOME_SUCCEEDED);
    SendLocked(std::move(finished));
    ++counts_.finished;
    task_.reset();
  } else if (now >= task_->next_report) {
    SendLocked(ReportLocked(*task_, /*last=*/false));
    task_->next_report = now + options_.report_interval;
  }
}

void LoadWorker::OnDone(const grpc::Status& /*status*/) {
  std::lock_guard<std::mutex> lock(mu_);
  done_ = true;
  done_cv_.notify_all();
}

}  // namespace stoke::load
