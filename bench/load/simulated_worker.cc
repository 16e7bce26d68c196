#include "bench/load/simulated_worker.h"

#include <algorithm>
#include <utility>

namespace stoke::load {

SimulatedWorker::SimulatedWorker(v1::WorkerLink::Stub& stub, std::string id, Options options)
    : stub_(stub), id_(std::move(id)), options_(std::move(options)) {}

SimulatedWorker::~SimulatedWorker() {
  std::unique_lock<std::mutex> lock(mu_);
  if (!started_) return;
  if (!done_) context_.TryCancel();
  done_cv_.wait(lock, [this] { return done_; });
}

void SimulatedWorker::Attach() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    started_ = true;
    if (!options_.token.empty()) {
      context_.AddMetadata("authorization", "Bearer " + options_.token);
    }
    stub_.async()->Attach(&context_, this);
    StartRead(&incoming_);
    v1::WorkerMessage reg;
    reg.mutable_register_()->set_worker_id(id_);
    reg.mutable_register_()->set_host(options_.host);
    reg.mutable_register_()->mutable_device()->set_type(v1::DEVICE_TYPE_CPU);
    reg.mutable_register_()->set_version("simulated");
    SendLocked(std::move(reg));
  }
  StartCall();
}

void SimulatedWorker::Detach(bool gracefully) {
  if (!gracefully) {
    context_.TryCancel();
    return;
  }
  std::lock_guard<std::mutex> lock(mu_);
  v1::WorkerMessage leaving;
  leaving.mutable_leaving()->set_reason("simulated shutdown");
  SendLocked(std::move(leaving));
  closing_ = true;
  if (writes_.idle() && !writes_done_sent_ && !done_) {
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

bool SimulatedWorker::done() const {
  std::lock_guard<std::mutex> lock(mu_);
  return done_;
}

SimulatedWorker::Counts SimulatedWorker::counts() const {
  std::lock_guard<std::mutex> lock(mu_);
  return counts_;
}

void SimulatedWorker::SendLocked(v1::WorkerMessage message) {
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
  if (!ok) return;  // the stream ended; OnDone follows
  Handle(incoming_);
  StartRead(&incoming_);
}

void SimulatedWorker::Handle(const v1::CoordinatorMessage& message) {
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
    std::optional<Clock::time_point> ends;
    if (options_.job_length) ends = now + *options_.job_length;
    uint64_t total_steps = 0;
    if (options_.seconds_per_step > 0) {
      total_steps = a.spec().training().steps();
      ends = now + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(
                       options_.seconds_per_step * static_cast<double>(total_steps)));
    }
    task_ =
        Task{a.job_id(), a.attempt(), ends, now + options_.report_interval, 0, total_steps, now};
    v1::WorkerMessage started;
    started.mutable_started()->set_job_id(a.job_id());
    started.mutable_started()->set_attempt(a.attempt());
    SendLocked(std::move(started));
    if (options_.job_length && options_.job_length->count() == 0) FinishLocked(*task_);
  } else if (message.has_preempt()) {
    // As stoke-worker's loop does: the step under way ends, a checkpoint is written, and
    // the task finishes as preempted.
    const v1::PreemptTask& preempt = message.preempt();
    if (!task_ || task_->job_id != preempt.job_id() || task_->attempt != preempt.attempt()) return;
    SendLocked(ReportLocked(*task_, /*last=*/false));
    v1::WorkerMessage finished;
    finished.mutable_finished()->set_job_id(task_->job_id);
    finished.mutable_finished()->set_attempt(task_->attempt);
    finished.mutable_finished()->set_outcome(v1::TASK_OUTCOME_PREEMPTED);
    finished.mutable_finished()->set_message("preempted after step " + std::to_string(task_->step) +
                                             ", its checkpoint written");
    SendLocked(std::move(finished));
    ++counts_.preempted;
    task_.reset();
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

v1::WorkerMessage SimulatedWorker::ReportLocked(Task& task, bool last) {
  v1::WorkerMessage message;
  v1::TaskReport* report = message.mutable_report();
  report->set_job_id(task.job_id);
  report->set_attempt(task.attempt);
  report->set_report_seq(++report_seq_);
  // What a small CPU job's window looks like: enough fields for the diagnoses to run.
  for (int i = 0; i < options_.samples_per_report; ++i) {
    v1::MetricSample* sample = report->add_metrics();
    if (options_.seconds_per_step > 0) {
      // Where a job of this step time would be by now.
      const double elapsed = std::chrono::duration<double>(Clock::now() - task.began).count();
      task.step = last ? task.total_steps
                       : std::min(task.total_steps,
                                  static_cast<uint64_t>(elapsed / options_.seconds_per_step));
      sample->set_step(task.step);
      sample->set_total_steps(task.total_steps);
      sample->set_step_seconds(options_.seconds_per_step);
      sample->set_loss(1.0);
      continue;
    }
    task.step += 50;
    sample->set_step(task.step);
    sample->set_total_steps(last ? task.step : task.step * 10);
    sample->set_loss(2.0 / (1.0 + static_cast<double>(task.step) / 50.0));
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

void SimulatedWorker::FinishLocked(Task& task) {
  SendLocked(ReportLocked(task, /*last=*/true));
  v1::WorkerMessage finished;
  finished.mutable_finished()->set_job_id(task.job_id);
  finished.mutable_finished()->set_attempt(task.attempt);
  finished.mutable_finished()->set_outcome(v1::TASK_OUTCOME_SUCCEEDED);
  SendLocked(std::move(finished));
  ++counts_.finished;
  task_.reset();
}

void SimulatedWorker::Tick(Clock::time_point now) {
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
  if (task_->ends && now >= *task_->ends) {
    FinishLocked(*task_);
  } else if (now >= task_->next_report) {
    SendLocked(ReportLocked(*task_, /*last=*/false));
    task_->next_report = now + options_.report_interval;
  }
}

void SimulatedWorker::OnDone(const grpc::Status& status) {
  std::lock_guard<std::mutex> lock(mu_);
  done_ = true;
  status_ = status;
  done_cv_.notify_all();
}

}  // namespace stoke::load
