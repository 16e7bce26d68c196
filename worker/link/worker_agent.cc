#include "worker/link/worker_agent.h"

#include "security/coordinator_target.h"
#include "security/grpc_credentials.h"

#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>

#include "absl/strings/str_format.h"
#include "proto/stoke/v1/limits.h"
#include "worker/link/task_translation.h"

namespace stoke::worker {
namespace {

// "first training step done 0.42 s after the assignment (data 0.01 s, model 0.02 s, first
// step 0.35 s)", for the job's log.
std::string DescribeStartup(const v1::WorkerStartup& startup) {
  auto seconds = [](double s) {
    char text[32];
    std::snprintf(text, sizeof(text), "%.2f s", s);
    return std::string(text);
  };
  std::string line =
      "first training step done " + seconds(startup.seconds()) + " after the assignment (";
  if (startup.process_seconds() > 0) {
    line += "training process " + seconds(startup.process_seconds()) + ", ";
  }
  line += "data " + seconds(startup.data_seconds()) + ", model " + seconds(startup.model_seconds());
  if (startup.compile_seconds() > 0) line += ", compile " + seconds(startup.compile_seconds());
  if (startup.batch_search_seconds() > 0) {
    line += ", batch search " + seconds(startup.batch_search_seconds());
  }
  return line + ", first step " + seconds(startup.first_step_seconds()) + ")";
}

}  // namespace

// Messages waiting for the sender thread, in the order they must reach the coordinator.
// Metric samples and log lines are merged into the trailing report of their task. It
// outlives connections: while no coordinator answers, it keeps what the task reports,
// the oldest samples and lines giving way (counted, and the counts sent with the next
// report) once it holds its limit of each.
class WorkerAgent::Outbox {
 public:
  Outbox(size_t max_samples, size_t max_logs) : max_samples_(max_samples), max_logs_(max_logs) {}

  // Control messages (started, finished) go out at once rather than at the next flush.
  void Push(v1::WorkerMessage message) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(std::move(message));
      woken_ = true;
    }
    cv_.notify_all();
  }

  void AddMetrics(const std::string& job, uint32_t attempt, const v1::MetricSample& sample) {
    std::lock_guard<std::mutex> lock(mu_);
    *ReportLocked(job, attempt)->add_metrics() = sample;
    if (++queued_samples_ > max_samples_) DropOldestLocked(/*log=*/false);
  }

  // The task's start-up joins its trailing report, which goes out now rather than at the
  // next flush: the coordinator shows it as soon as it is known.
  void AddStartup(const std::string& job, uint32_t attempt, const v1::WorkerStartup& startup) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      *ReportLocked(job, attempt)->mutable_startup() = startup;
      woken_ = true;
    }
    cv_.notify_all();
  }

  void AddLog(const std::string& job, uint32_t attempt, const std::string& text) {
    std::lock_guard<std::mutex> lock(mu_);
    ReportLocked(job, attempt)->add_logs()->set_text(text);
    if (++queued_logs_ > max_logs_) DropOldestLocked(/*log=*/true);
  }

  // Waits up to `wait` for something to send (less if woken), then takes it all.
  std::deque<v1::WorkerMessage> Take(std::chrono::milliseconds wait) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, wait, [this] { return woken_; });
    woken_ = false;
    std::deque<v1::WorkerMessage> taken;
    taken.swap(queue_);
    queued_samples_ = 0;
    queued_logs_ = 0;
    return taken;
  }

  // Messages taken but not sent (the stream broke): back to the front, for the next
  // coordinator, ahead of what was queued meanwhile.
  void PutBack(std::deque<v1::WorkerMessage> unsent) {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& message : unsent) {
      if (!message.has_report()) continue;
      queued_samples_ += message.report().metrics_size();
      queued_logs_ += message.report().logs_size();
    }
    for (auto& message : queue_) unsent.push_back(std::move(message));
    queue_.swap(unsent);
    while (queued_samples_ > max_samples_) DropOldestLocked(/*log=*/false);
    while (queued_logs_ > max_logs_) DropOldestLocked(/*log=*/true);
  }

  void Wake() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      woken_ = true;
    }
    cv_.notify_all();
  }

 private:
  v1::TaskReport* ReportLocked(const std::string& job, uint32_t attempt) {
    // A numbered report was sent before (it waits to be sent again): the coordinator
    // skips it whole if it has it, so nothing new may join it.
    if (queue_.empty() || !queue_.back().has_report() || queue_.back().report().job_id() != job ||
        queue_.back().report().attempt() != attempt || queue_.back().report().report_seq() != 0) {
      v1::TaskReport* report = queue_.emplace_back().mutable_report();
      report->set_job_id(job);
      report->set_attempt(attempt);
    }
    return queue_.back().mutable_report();
  }

  void DropOldestLocked(bool log) {
    for (auto& message : queue_) {
      if (!message.has_report()) continue;
      v1::TaskReport* report = message.mutable_report();
      if (log && report->logs_size() > 0) {
        report->mutable_logs()->DeleteSubrange(0, 1);
        report->set_dropped_logs(report->dropped_logs() + 1);
        --queued_logs_;
        return;
      }
      if (!log && report->metrics_size() > 0) {
        report->mutable_metrics()->DeleteSubrange(0, 1);
        report->set_dropped_samples(report->dropped_samples() + 1);
        --queued_samples_;
        return;
      }
    }
  }

  const size_t max_samples_;
  const size_t max_logs_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<v1::WorkerMessage> queue_;
  size_t queued_samples_ = 0;
  size_t queued_logs_ = 0;
  bool woken_ = false;
};

// Feeds one task's reports into the outbox; runs on the training thread, never blocks.
class WorkerAgent::Observer final : public TrainingObserver {
 public:
  Observer(WorkerAgent& agent, const v1::Assignment& assignment,
           std::chrono::steady_clock::time_point assigned_at)
      : agent_(agent),
        outbox_(*agent.outbox_),
        job_(assignment.job_id()),
        attempt_(assignment.attempt()),
        script_(assignment.spec().has_command()),
        assigned_at_(assigned_at) {}

  void OnStarted() override {
    agent_.MarkHeldTaskStarted(job_, attempt_);
    v1::WorkerMessage message;
    message.mutable_started()->set_job_id(job_);
    message.mutable_started()->set_attempt(attempt_);
    outbox_.Push(std::move(message));
  }
  void OnFirstStep(const StartupTimes& times) override {
    v1::WorkerStartup startup = ToProto(times);
    startup.set_seconds(
        std::max(0.0, std::chrono::duration<double>(times.completed_at - assigned_at_).count()));
    // A script's start-up is all its own, up to its first report.
    OnLog(script_ ? absl::StrFormat("first report %.2f s after the assignment", startup.seconds())
                  : DescribeStartup(startup));
    outbox_.AddStartup(job_, attempt_, startup);
  }
  void OnMetrics(const MetricSample& sample) override {
    outbox_.AddMetrics(job_, attempt_, ToProto(sample));
  }
  void OnLog(const std::string& line) override {
    spdlog::info("job {}: {}", job_, line);
    outbox_.AddLog(job_, attempt_, line);
  }

 private:
  WorkerAgent& agent_;
  Outbox& outbox_;
  const std::string job_;
  const uint32_t attempt_;
  const bool script_;
  const std::chrono::steady_clock::time_point assigned_at_;
};

WorkerAgent::WorkerAgent(Options options, TrainFunction train)
    : options_(std::move(options)),
      train_(std::move(train)),
      outbox_(std::make_unique<Outbox>(options_.max_queued_samples, options_.max_queued_logs)) {}

WorkerAgent::~WorkerAgent() {
  Stop();
  StopTask();
  if (cancel_watchdog_.joinable()) cancel_watchdog_.join();
}

namespace {

// The first line of `path` (a coordinator's address file), or "" when it cannot be read.
std::string ReadAddressFile(const std::string& path) {
  std::ifstream in(path);
  std::string address;
  in >> address;
  return address;
}

}  // namespace

absl::Status WorkerAgent::Run() {
  auto credentials =
      security::MakeChannelCredentials({options_.tls_ca, options_.tls_cert, options_.tls_key});
  if (!credentials.ok()) return credentials.status();
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, v1::kWorkerKeepaliveMs);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, v1::kKeepaliveTimeoutMs);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  // gRPC's own reconnects wait no longer than ours between attach attempts.
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS,
              static_cast<int>(options_.max_reconnect_backoff.count()));
  // The coordinator's own limit, so that whatever it accepts reaches its workers.
  args.SetMaxReceiveMessageSize(v1::kMaxMessageBytes);
  args.SetMaxSendMessageSize(v1::kMaxMessageBytes);
  std::string address = options_.coordinator_address;
  std::string stub_address;
  std::unique_ptr<v1::WorkerLink::Stub> stub;
  auto backoff = std::chrono::milliseconds(250);
  // When a coordinator last answered: starting counts, so that one that never comes up
  // ends an orphan too.
  auto last_answered = std::chrono::steady_clock::now();
  while (!stopping_) {
    if (!options_.coordinator_address_file.empty()) {
      // A restarted coordinator may listen elsewhere (port 0); it writes where.
      const std::string dir =
          options_.coordinator_address_file.substr(0, options_.coordinator_address_file.rfind('/'));
      if (access(dir.c_str(), F_OK) != 0) {
        spdlog::error("{} is gone: the coordinator's data dir was removed; exiting", dir);
        break;
      }
      if (std::string read = ReadAddressFile(options_.coordinator_address_file); !read.empty()) {
        address = read;
      }
    }
    if (!stub || address != stub_address) {
      // A comma-separated list names a leader and its standbys: the channel follows the
      // leader.
      grpc::ChannelArguments channel_args = args;
      auto target = security::CoordinatorTarget(address, "--coordinator", &channel_args);
      if (!target.ok()) return target.status();
      stub =
          v1::WorkerLink::NewStub(grpc::CreateCustomChannel(*target, *credentials, channel_args));
      stub_address = address;
    }
    const auto began = std::chrono::steady_clock::now();
    // A channel that failed to connect waits out gRPC's own backoff before it tries
    // again; a fresh one tries at once, so a restarted coordinator is found within our
    // backoff rather than gRPC's.
    if (Serve(*stub, address)) {
      last_answered = std::chrono::steady_clock::now();
    } else {
      stub.reset();
    }
    if (stopping_) break;
    const auto silent = std::chrono::steady_clock::now() - last_answered;
    if (options_.orphan_timeout.count() > 0 && silent >= options_.orphan_timeout &&
        !task_running_) {
      spdlog::warn(
          "no coordinator has answered at {} for {} s (--orphan-timeout {} s) and no task runs: "
          "exiting",
          address, std::chrono::duration_cast<std::chrono::seconds>(silent).count(),
          std::chrono::duration_cast<std::chrono::seconds>(options_.orphan_timeout).count());
      break;
    }
    // A connection that lasted resets the backoff; quick failures back off further.
    if (std::chrono::steady_clock::now() - began > std::chrono::seconds(10)) {
      backoff = std::chrono::milliseconds(250);
    }
    std::unique_lock<std::mutex> lock(stop_mu_);
    stop_cv_.wait_for(lock, backoff, [this] { return stopping_.load(); });
    backoff = std::min(backoff * 2, options_.max_reconnect_backoff);
  }
  return absl::OkStatus();
}

std::optional<v1::HeldTask> WorkerAgent::CurrentHeldTask() {
  std::lock_guard<std::mutex> lock(held_mu_);
  return held_;
}

void WorkerAgent::MarkHeldTaskStarted(const std::string& job_id, uint32_t attempt) {
  std::lock_guard<std::mutex> lock(held_mu_);
  if (held_ && held_->job_id() == job_id && held_->attempt() == attempt) held_->set_started(true);
}

void WorkerAgent::OnSent(const v1::WorkerMessage& message) {
  if (message.has_report() || message.has_finished()) {
    recent_.push_back({std::chrono::steady_clock::now(), message});
  }
  PruneRecent();
}

void WorkerAgent::PruneRecent() {
  const auto oldest = std::chrono::steady_clock::now() - options_.resend_window;
  while (!recent_.empty() && recent_.front().at < oldest) {
    const v1::WorkerMessage& message = recent_.front().message;
    if (message.has_finished()) {
      // Its outcome has surely reached a coordinator: the task is no longer ours.
      std::lock_guard<std::mutex> lock(held_mu_);
      if (held_ && held_->job_id() == message.finished().job_id() &&
          held_->attempt() == message.finished().attempt()) {
        held_.reset();
      }
    }
    recent_.pop_front();
  }
}

bool WorkerAgent::Serve(v1::WorkerLink::Stub& stub, const std::string& address) {
  grpc::ClientContext context;
  {
    std::lock_guard<std::mutex> lock(stop_mu_);
    if (stopping_) return true;
    active_context_ = &context;
  }
  auto clear_context = [&] {
    attached_ = false;
    std::lock_guard<std::mutex> lock(stop_mu_);
    active_context_ = nullptr;
    stop_cv_.notify_all();
  };
  if (!options_.join_token.empty()) {
    context.AddMetadata("authorization", "Bearer " + options_.join_token);
  }
  // With a leader and standbys, attaching waits for whichever leads (Stop() cancels it).
  if (security::IsCoordinatorList(address)) context.set_wait_for_ready(true);
  std::unique_ptr<Stream> stream = stub.Attach(&context);

  v1::WorkerMessage hello;
  auto* reg = hello.mutable_register_();
  reg->set_worker_id(options_.worker_id);
  reg->set_host(options_.host);
  *reg->mutable_device() = ToProto(options_.device);
  reg->set_pid(static_cast<uint32_t>(getpid()));
  reg->set_version(STOKE_VERSION);
  reg->set_local(options_.local);
  reg->set_advertise_address(options_.advertise_address);
  if (auto held = CurrentHeldTask()) *reg->mutable_held_task() = *held;
  v1::CoordinatorMessage reply;
  if (!stream->Write(hello) || !stream->Read(&reply) || !reply.has_registered()) {
    grpc::Status status = stream->Finish();
    // A refused credential will not be accepted on the next try either: say so loudly.
    const bool refused = status.error_code() == grpc::StatusCode::UNAUTHENTICATED ||
                         status.error_code() == grpc::StatusCode::PERMISSION_DENIED;
    const std::string why = status.ok() ? "unexpected reply" : status.error_message();
    if (refused) {
      spdlog::error("coordinator {} refused this worker: {}", address, why);
    } else {
      spdlog::warn("cannot attach to coordinator {}: {}", address, why);
    }
    clear_context();
    return false;
  }
  attached_ = true;
  if (reply.registered().heartbeat_interval_ms() > 0) {
    heartbeat_interval_ = std::chrono::milliseconds(reply.registered().heartbeat_interval_ms());
  }
  spdlog::info(
      "attached to coordinator {} as {}{}", address, options_.worker_id,
      reg->has_held_task() ? " (still holding job " + reg->held_task().job_id() + ")" : "");

  // What the previous coordinator may have lost goes first; it drops what it has.
  PruneRecent();
  if (!recent_.empty()) {
    std::deque<v1::WorkerMessage> again;
    for (auto& sent : recent_) again.push_back(std::move(sent.message));
    recent_.clear();
    outbox_->PutBack(std::move(again));
  }

  std::atomic<bool> connected{true};
  std::thread sender([&] {
    auto last_heartbeat = std::chrono::steady_clock::now();
    while (connected) {
      // Read before taking: Stop() sets it only once everything it had to say is queued.
      const bool closing = close_requested_;
      auto batch = outbox_->Take(options_.flush_interval);
      while (!batch.empty()) {
        if (batch.front().has_report() && batch.front().report().report_seq() == 0) {
          batch.front().mutable_report()->set_report_seq(++next_report_seq_);
        }
        if (!stream->Write(batch.front())) {
          // Kept for the next coordinator; the task trains on meanwhile.
          outbox_->PutBack(std::move(batch));
          context.TryCancel();  // ends the Read below too
          return;
        }
        OnSent(batch.front());
        batch.pop_front();
      }
      if (closing) {
        // Half-close: the coordinator reads all we sent, then ends the stream.
        stream->WritesDone();
        return;
      }
      // Every interval, even while reports flow: heartbeats carry the device's readings.
      if (std::chrono::steady_clock::now() - last_heartbeat >= heartbeat_interval_) {
        v1::WorkerMessage beat;
        auto* heartbeat = beat.mutable_heartbeat();
        if (options_.device_stats) {
          if (auto stats = options_.device_stats())
            *heartbeat->mutable_device_stats() = ToProto(*stats);
        }
        if (!stream->Write(beat)) {
          context.TryCancel();
          return;
        }
        last_heartbeat = std::chrono::steady_clock::now();
      }
      PruneRecent();
    }
  });

  v1::CoordinatorMessage message;
  while (stream->Read(&message)) {
    if (message.has_assignment()) {
      StartTask(message.assignment());
    } else if (message.has_cancel()) {
      CancelTask(message.cancel());
    } else if (message.has_preempt()) {
      PreemptTask(message.preempt());
    }
  }
  // The stream is gone, but not the task: it trains on, its reports wait in the outbox,
  // and the next coordinator to answer takes it back (or cancels it if it gave up on it).
  connected = false;
  outbox_->Wake();
  sender.join();
  grpc::Status status = stream->Finish();
  clear_context();
  if (!stopping_) {
    spdlog::warn("lost the coordinator at {}: {}; reconnecting", address,
                 status.ok() ? "stream closed" : status.error_message());
  }
  return true;
}

void WorkerAgent::StartTask(const v1::Assignment& assignment) {
  const auto assigned_at = std::chrono::steady_clock::now();
  std::lock_guard<std::mutex> lock(task_mu_);
  if (task_running_) {
    v1::WorkerMessage busy;
    auto* finished = busy.mutable_finished();
    finished->set_job_id(assignment.job_id());
    finished->set_attempt(assignment.attempt());
    finished->set_outcome(v1::TASK_OUTCOME_FAILED);
    finished->set_message("worker " + options_.worker_id + " is still running job " + task_job_);
    finished->set_retryable(true);
    outbox_->Push(std::move(busy));
    return;
  }
  if (task_thread_.joinable()) task_thread_.join();
  task_job_ = assignment.job_id();
  task_attempt_ = assignment.attempt();
  task_stops_.cancel = false;
  task_stops_.preempt_after = TaskStops::kNotPreempted;
  task_running_ = true;
  task_is_script_ = assignment.spec().has_command();
  // A script job's ranks are processes the worker kills at their grace's end; a rank of
  // Stoke's own loop may hang in a collective of this process.
  watch_cancel_ = assignment.world_size() > 1 && !assignment.spec().has_command();
  {
    std::lock_guard<std::mutex> held_lock(held_mu_);
    held_.emplace();
    held_->set_job_id(assignment.job_id());
    held_->set_attempt(assignment.attempt());
    held_->set_rank(assignment.rank());
    held_->set_task_key(assignment.task_key());
  }
  task_thread_ = std::thread([this, assignment, assigned_at] {
    v1::WorkerMessage done;
    auto* finished = done.mutable_finished();
    finished->set_job_id(assignment.job_id());
    finished->set_attempt(assignment.attempt());
    spdlog::info("job {} attempt {}: rank {} of {} starting", assignment.job_id(),
                 assignment.attempt(), assignment.rank(), std::max(1u, assignment.world_size()));
    Observer observer(*this, assignment, assigned_at);
    TrainOutcome outcome = train_(assignment, observer, task_stops_);
    if (outcome.kind == TrainOutcome::Kind::kCancelled && task_stops_.Preempted()) {
      // A script stopped as for a cancel: the coordinator asked for a preemption.
      outcome = {TrainOutcome::Kind::kPreempted, "preempted: " + outcome.message, true};
    }
    spdlog::info("job {} attempt {}: {}", assignment.job_id(), assignment.attempt(),
                 outcome.message);
    finished->set_outcome(ToProto(outcome.kind));
    finished->set_message(outcome.message);
    finished->set_retryable(outcome.retryable);
    // Free before the coordinator hears of it, or its next assignment would find us busy.
    {
      std::lock_guard<std::mutex> lock(task_mu_);
      task_running_ = false;
    }
    task_done_cv_.notify_all();
    outbox_->Push(std::move(done));
  });
}

void WorkerAgent::CancelTask(const v1::CancelTask& cancel) {
  std::lock_guard<std::mutex> lock(task_mu_);
  if (task_running_ && task_job_ == cancel.job_id() && task_attempt_ == cancel.attempt()) {
    spdlog::info("job {}: cancel requested ({})", cancel.job_id(), cancel.reason());
    task_stops_.cancel = true;
    if (watch_cancel_ && watchdog_done_) {
      if (cancel_watchdog_.joinable()) cancel_watchdog_.join();  // it has returned
      watchdog_done_ = false;
      cancel_watchdog_ =
          std::thread(&WorkerAgent::WatchCancel, this, cancel.job_id(), cancel.attempt());
    }
  }
}

void WorkerAgent::PreemptTask(const v1::PreemptTask& preempt) {
  {
    std::lock_guard<std::mutex> lock(task_mu_);
    if (!task_running_ || task_job_ != preempt.job_id() || task_attempt_ != preempt.attempt()) {
      return;
    }
    spdlog::info("job {}: preemption requested after step {} ({})", preempt.job_id(),
                 preempt.after_step(), preempt.reason());
    task_stops_.preempt_after = preempt.after_step();
    // A script's program has no step boundary Stoke can stop it at: it is told to stop
    // (stoke.should_stop(), then SIGTERM within its grace) as for a cancel.
    if (!task_is_script_) return;
  }
  v1::CancelTask cancel;
  cancel.set_job_id(preempt.job_id());
  cancel.set_attempt(preempt.attempt());
  cancel.set_reason(preempt.reason());
  CancelTask(cancel);
}

void WorkerAgent::WatchCancel(std::string job_id, uint32_t attempt) {
  std::unique_lock<std::mutex> lock(task_mu_);
  const bool ended = task_done_cv_.wait_for(lock, options_.cancel_grace, [&] {
    return !task_running_ || task_job_ != job_id || task_attempt_ != attempt;
  });
  if (!ended) {
    spdlog::critical(
        "job {} attempt {}: cancelled {} ms ago but still inside a collective; "
        "exiting so that the device is freed",
        job_id, attempt, options_.cancel_grace.count());
    spdlog::shutdown();
    std::_Exit(75);
  }
  watchdog_done_ = true;  // under task_mu_, as the thread's last act
}

void WorkerAgent::StopTask() {
  std::thread running;
  {
    std::lock_guard<std::mutex> lock(task_mu_);
    task_stops_.cancel = true;
    running = std::move(task_thread_);
  }
  // Joined without the lock: the task takes it to mark itself finished.
  if (running.joinable()) running.join();
}

void WorkerAgent::AwaitTaskStop() {
  spdlog::info("letting the task stop at a step boundary first (up to {} ms)",
               options_.stop_grace.count());
  const auto deadline = std::chrono::steady_clock::now() + options_.stop_grace;
  std::unique_lock<std::mutex> lock(task_mu_);
  // Polled, not only woken: a lost link must end the wait too.
  while (task_running_ && attached_ && std::chrono::steady_clock::now() < deadline) {
    task_done_cv_.wait_for(lock, std::chrono::milliseconds(50));
  }
}

void WorkerAgent::Stop() {
  if (stopping_.exchange(true)) return;
  // First tell the coordinator to send nothing more and to re-queue what runs here (with a
  // grace, it preempts the task to stop at a step boundary); then stop the task (its
  // outcome joins the queue) and let the sender deliver it all and half-close. Cancelling
  // the call instead could drop messages the coordinator had received but not yet read.
  const bool let_stop = options_.stop_grace.count() > 0 && attached_ && task_running_;
  v1::WorkerMessage leaving;
  leaving.mutable_leaving()->set_reason("stoke-worker stopped");
  if (let_stop) {
    leaving.mutable_leaving()->set_stop_grace_ms(
        static_cast<uint32_t>(options_.stop_grace.count()));
  }
  outbox_->Push(std::move(leaving));
  if (let_stop) AwaitTaskStop();
  StopTask();
  close_requested_ = true;
  outbox_->Wake();
  std::unique_lock<std::mutex> lock(stop_mu_);
  if (!stop_cv_.wait_for(lock, std::chrono::seconds(5),
                         [this] { return active_context_ == nullptr; })) {
    active_context_->TryCancel();  // the coordinator did not answer: give up on it
  }
  stop_cv_.notify_all();
}

}  // namespace stoke::worker
