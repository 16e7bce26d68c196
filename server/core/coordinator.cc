#include "server/core/coordinator.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/common/device_label.h"
#include "server/common/time_util.h"
#include "server/core/job_startup.h"
#include "spec/code_bundle.h"

namespace stoke::server {
namespace {

bool IsLive(v1::JobState state) {
  return state == v1::JOB_STATE_SCHEDULED || state == v1::JOB_STATE_RUNNING;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Coordinator>> Coordinator::Create(Options options, JobStore& store,
                                                                 EventHub& hub, Clock& clock) {
  if (options.heartbeat_timeout <= options.heartbeat_interval) {
    return absl::InvalidArgumentError("heartbeat timeout must exceed the heartbeat interval");
  }
  if (options.telemetry.max_queued_events == 0 || options.telemetry.max_batch_events == 0) {
    return absl::InvalidArgumentError("telemetry queue and batch sizes must be positive");
  }
  return std::unique_ptr<Coordinator>(new Coordinator(std::move(options), store, hub, clock));
}

Coordinator::Coordinator(Options options, JobStore& store, EventHub& hub, Clock& clock)
    : options_(std::move(options)),
      store_(store),
      clock_(clock),
      scheduler_(options_.scheduler),
      telemetry_(*TelemetryWriter::Create(options_.telemetry, store, hub)),
      jobs_(store, hub, clock, telemetry_.get()),
      last_tick_(clock.Now()) {}

Coordinator::~Coordinator() { Stop(); }

absl::Status Coordinator::Start() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto s = jobs_.Recover(); !s.ok()) return s;
    spdlog::info("recovered {} unfinished jobs from the store", jobs_.Active().size());
    const absl::Time now = clock_.Now();
    for (const v1::Job* job : jobs_.Active()) {
      if (!IsLive(job->state())) continue;
      attempts_.insert_or_assign(job->id(),
                                 Attempt::Recovered(*job, now, now + options_.heartbeat_timeout));
      spdlog::info("job {} attempt {} was {}: waiting up to {} for its workers to reattach",
                   job->id(), job->attempt(), StateName(job->state()),
                   absl::FormatDuration(options_.heartbeat_timeout));
    }
  }
  telemetry_->Start();
  if (options_.tick_interval > absl::ZeroDuration()) {
    ticker_ = std::thread([this] { TickLoop(); });
  }
  return absl::OkStatus();
}

void Coordinator::BeginShutdown() {
  std::lock_guard<std::mutex> lock(mu_);
  shutting_down_ = true;
}

void Coordinator::Stop() {
  {
    std::lock_guard<std::mutex> lock(tick_mu_);
    stopping_ = true;
  }
  tick_cv_.notify_all();
  if (ticker_.joinable()) ticker_.join();
  telemetry_->Stop();
}

void Coordinator::FlushTelemetry() { telemetry_->FlushAll(); }

void Coordinator::TickLoop() {
  std::unique_lock<std::mutex> lock(tick_mu_);
  while (!tick_cv_.wait_for(lock, absl::ToChronoMilliseconds(options_.tick_interval),
                            [this] { return stopping_; })) {
    lock.unlock();
    Tick();
    lock.lock();
  }
}

// ----------------------------------------------------------------------------- public API

absl::StatusOr<v1::Job> Coordinator::SubmitJob(const v1::JobSpec& spec,
                                               const std::string& request_id,
                                               const std::string& owner,
                                               const v1::AuditEntry* audit, bool* audited,
                                               const v1::CodeBundle* code) {
  if (code != nullptr) {
    // Before the job and outside the lock (megabytes to write): stored under its digest,
    // it is there for the job once the job exists; a job that is then refused leaves
    // code no job names, which is harmless.
    if (auto s = store_.PutCode(spec::CodeDigestOf(spec), code->SerializeAsString()); !s.ok()) {
      return s;
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (!request_id.empty()) {
    // Under mu_, so two racing retries cannot both create a job.
    auto earlier = store_.FindJobByRequestId(request_id);
    if (earlier.ok()) {
      // Someone else's id answers nothing about their job.
      if (earlier->owner() != owner) {
        return absl::AlreadyExistsError("request_id: already used by another submitter");
      }
      if (earlier->spec().SerializeAsString() != spec.SerializeAsString()) {
        return absl::AlreadyExistsError(
            absl::StrCat("request_id: job ", earlier->id(),
                         " was submitted with this request_id and another spec"));
      }
      auto current = jobs_.Get(earlier->id());
      return current.ok() ? WithWaitingReason(*current) : *earlier;
    }
    if (earlier.status().code() != absl::StatusCode::kNotFound) return earlier.status();
  }
  size_t unfinished = 0;
  for (const v1::Job* active : jobs_.Active()) unfinished += active->owner() == owner;
  if (unfinished >= options_.max_unfinished_jobs_per_owner) {
    return absl::ResourceExhaustedError(absl::StrCat(
        owner.empty() ? "this coordinator" : absl::StrCat("owner ", owner), " has ", unfinished,
        " unfinished jobs, the most allowed; wait for some to finish or "
        "cancel them"));
  }
  auto job = jobs_.Create(spec, request_id, owner, audit);
  if (!job.ok()) return job.status();
  if (audited != nullptr) *audited = audit != nullptr;
  spdlog::info("job {} submitted: {}", job->id(), spec.name());
  Schedule();
  // Scheduling may already have moved it on.
  auto current = jobs_.Get(job->id());
  return current.ok() ? WithWaitingReason(*current) : *job;
}

// Reads take the job book's published view, not mu_: a transition holds mu_ through its
// disk sync, and a read must not queue behind every one of them.
absl::StatusOr<v1::Job> Coordinator::GetJob(const std::string& id) {
  auto job = jobs_.Published(id);
  if (!job.ok()) return job.status();
  return WithStragglers(WithWaitingReason(*std::move(job)));
}

absl::StatusOr<JobPage> Coordinator::ListJobs(const JobQuery& query) {
  auto page = store_.ListJobs(query);
  if (!page.ok()) return page.status();
  for (auto& job : page->jobs) {
    // The store row of a live job lags memory only by metrics; prefer memory.
    if (IsTerminal(job.state())) continue;
    auto published = jobs_.Published(job.id());
    if (published.ok()) job = *std::move(published);
    job = WithStragglers(WithWaitingReason(std::move(job)));
  }
  return page;
}

absl::StatusOr<v1::Job> Coordinator::CancelJob(const std::string& id, const std::string& reason) {
  std::lock_guard<std::mutex> lock(mu_);
  const v1::Job* job = jobs_.FindActive(id);
  if (job == nullptr) {
    auto stored = jobs_.Get(id);
    if (!stored.ok()) return stored.status();
    return absl::FailedPreconditionError(
        absl::StrCat("job ", id, " has already finished (", StateName(stored->state()), ")"));
  }
  const bool was_live = IsLive(job->state());
  std::string message = reason.empty() ? "cancelled" : absl::StrCat("cancelled: ", reason);
  if (auto s = jobs_.Transition(id, v1::JOB_STATE_CANCELLED, message); !s.ok()) return s;
  spdlog::info("job {} {}", id, message);
  if (was_live) StopGang(id, message);
  Schedule();  // also forgets why the job was waiting
  return jobs_.Get(id);
}

v1::Cluster Coordinator::GetCluster() {
  std::lock_guard<std::mutex> lock(mu_);
  v1::Cluster cluster;
  for (auto& worker : workers_.List()) *cluster.add_workers() = std::move(worker);
  for (const v1::Job* job : jobs_.Active()) {
    if (IsQueued(job->state())) {
      cluster.set_queued_jobs(cluster.queued_jobs() + 1);
    } else {
      cluster.set_running_jobs(cluster.running_jobs() + 1);
    }
  }
  cluster.set_coordinator_version(STOKE_VERSION);
  cluster.set_refused_worker_reports(refused_reports_);
  cluster.set_telemetry_events_dropped(telemetry_->dropped());
  cluster.set_telemetry_events_queued(telemetry_->queued());
  return cluster;
}

void Coordinator::RefuseReport(const std::string& worker_id, const char* kind,
                               const std::string& job_id) {
  ++refused_reports_;
  spdlog::warn("worker {}: {} for job {} refused: the job's current attempt is not assigned to it",
               worker_id, kind, job_id);
}

std::vector<v1::Job> Coordinator::ActiveJobs() {
  std::vector<v1::Job> jobs = jobs_.PublishedActive();
  for (v1::Job& job : jobs) job = WithStragglers(std::move(job));
  return jobs;
}

absl::StatusOr<std::vector<CheckpointFiles>> Coordinator::ListCheckpoints(const std::string& id) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto job = jobs_.Get(id); !job.ok()) return job.status();
  }
  return ListCheckpointFiles(absl::StrCat(options_.jobs_dir, "/", id));
}

// ----------------------------------------------------------------------------- workers

absl::Status Coordinator::AttachWorker(const v1::RegisterWorker& registration,
                                       const std::string& address,
                                       std::shared_ptr<WorkerConnection> connection,
                                       const std::string& credential) {
  if (registration.worker_id().empty()) {
    return absl::InvalidArgumentError("register.worker_id: must not be empty");
  }
  if (registration.device().type() == v1::DEVICE_TYPE_UNSPECIFIED) {
    return absl::InvalidArgumentError("register.device.type: must be CPU or CUDA");
  }
  if (!credential.empty()) {
    // Checked before anything changes: a process that may not take this id must not
    // evict the worker that holds it.
    auto bound = store_.BindWorkerCredential(registration.worker_id(), credential);
    if (!bound.ok()) return bound.status();
    if (*bound != credential) {
      return absl::PermissionDeniedError(absl::StrCat(
          "register.worker_id: ", registration.worker_id(),
          " is bound to another credential; a worker keeps the id it first registered with"));
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  // An id is its live connection's: a second registration (with any credential) waits
  // until the holder has gone silent for three heartbeats. A worker reconnecting after its
  // own stream broke gets in once the coordinator has noticed; a process that merely holds
  // a credential cannot knock a training worker off its job.
  if (const WorkerEntry* holder = workers_.Find(registration.worker_id())) {
    const absl::Duration silent = clock_.Now() - holder->last_seen;
    if (silent < 3 * options_.heartbeat_interval) {
      return absl::AlreadyExistsError(absl::StrCat(
          "register.worker_id: ", registration.worker_id(), " is attached and was heard from ",
          absl::FormatDuration(absl::Trunc(silent, absl::Milliseconds(100))),
          " ago; a second registration waits until it has been silent for ",
          absl::FormatDuration(3 * options_.heartbeat_interval)));
    }
  }
  v1::Worker info;
  info.set_id(registration.worker_id());
  info.set_host(registration.host());
  *info.mutable_device() = registration.device();
  info.set_local(registration.local());
  info.set_pid(registration.pid());
  info.set_version(registration.version());
  info.set_address(registration.advertise_address().empty() ? address
                                                            : registration.advertise_address());
  auto replaced = workers_.Attach(std::move(info), connection, clock_.Now());
  const v1::HeldTask* held = registration.has_held_task() ? &registration.held_task() : nullptr;
  if (replaced) {
    replaced->connection->Close("replaced by a new registration of the same worker");
    // The same process on a new stream, still on its task: nothing was lost.
    const bool same_task = held != nullptr && replaced->info.state() != v1::WORKER_STATE_IDLE &&
                           replaced->info.job_id() == held->job_id() &&
                           replaced->attempt == held->attempt();
    // The silent holder's job goes back to the queue without a restart counted against
    // it: its worker's process was replaced, which is no fault of the job.
    if (!same_task && replaced->info.state() == v1::WORKER_STATE_BUSY) {
      RequeueAttempt(replaced->info.job_id(), replaced->attempt,
                     absl::StrCat("worker ", registration.worker_id(),
                                  " registered again; its previous process is gone"));
    }
  }
  spdlog::info("worker {} attached: {} {} on {}", registration.worker_id(),
               DeviceLabel(registration.device()), registration.device().name(),
               registration.host());
  v1::CoordinatorMessage reply;
  reply.mutable_registered()->set_worker_id(registration.worker_id());
  reply.mutable_registered()->set_heartbeat_interval_ms(
      static_cast<uint32_t>(absl::ToInt64Milliseconds(options_.heartbeat_interval)));
  connection->Send(reply);
  if (held != nullptr) {
    ReclaimTask(registration.worker_id(), *held);
  } else {
    ReleaseRecoveredPlacements(registration.worker_id());
  }
  Schedule();
  return absl::OkStatus();
}

void Coordinator::ReclaimTask(const std::string& worker_id, const v1::HeldTask& held) {
  const v1::Job* job = jobs_.FindActive(held.job_id());
  const bool current = job != nullptr && IsLive(job->state()) && job->attempt() == held.attempt() &&
                       held.rank() < static_cast<uint32_t>(job->placement_size()) &&
                       job->placement(static_cast<int>(held.rank())).worker_id() == worker_id;
  workers_.MarkBusy(worker_id, held.job_id(), held.attempt(), held.rank());
  if (!current) {
    // An attempt given up on while the worker was away: its device frees up once the
    // worker confirms the task has stopped.
    spdlog::info(
        "worker {} reattached holding job {} attempt {}, which is no longer its; "
        "cancelling it",
        worker_id, held.job_id(), held.attempt());
    v1::CoordinatorMessage cancel;
    cancel.mutable_cancel()->set_job_id(held.job_id());
    cancel.mutable_cancel()->set_attempt(held.attempt());
    cancel.mutable_cancel()->set_reason("the coordinator gave up on this attempt");
    workers_.Find(worker_id)->connection->Send(cancel);
    workers_.MarkDraining(worker_id);
    return;
  }
  spdlog::info("worker {} reattached holding job {} attempt {} rank {}; it carries on", worker_id,
               held.job_id(), held.attempt(), held.rank());
  Attempt* attempt = CurrentAttempt(*job);
  if (held.started() && job->state() == v1::JOB_STATE_SCHEDULED && attempt != nullptr &&
      attempt->RankStarted(held.rank())) {
    Running(*job, *attempt);
  }
}

void Coordinator::Running(const v1::Job& job, Attempt& attempt) {
  attempt.Running();
  std::vector<std::string> where;
  for (const auto& p : job.placement()) where.push_back(p.worker_id());
  RecordTransition(job.id(), job.attempt(), v1::JOB_STATE_RUNNING,
                   absl::StrCat("running on ", absl::StrJoin(where, ", ")));
}

Attempt* Coordinator::CurrentAttempt(const v1::Job& job) {
  auto it = attempts_.find(job.id());
  return it != attempts_.end() && it->second.number() == job.attempt() ? &it->second : nullptr;
}

void Coordinator::EndAttempt(const std::string& job_id) {
  attempts_.erase(job_id);
  std::lock_guard<std::mutex> lock(stragglers_mu_);
  stragglers_.erase(job_id);
}

void Coordinator::ReleaseRecoveredPlacements(const std::string& worker_id) {
  std::vector<std::pair<std::string, uint32_t>> lost;
  for (const auto& [job_id, attempt] : attempts_) {
    const v1::Job* job = jobs_.FindActive(job_id);
    if (!attempt.reattach_deadline() || !job || !IsLive(job->state())) continue;
    for (const auto& p : job->placement()) {
      if (p.worker_id() == worker_id) lost.emplace_back(job_id, job->attempt());
    }
  }
  for (const auto& [job_id, attempt] : lost) {
    RequeueAttempt(job_id, attempt,
                   absl::StrCat("the coordinator restarted and worker ", worker_id,
                                " came back without the job (its process restarted)"));
  }
}

void Coordinator::SettleRecoveredJobs() {
  const absl::Time now = clock_.Now();
  std::vector<std::pair<std::string, std::string>> lost;  // job, why
  for (auto& [job_id, attempt] : attempts_) {
    const v1::Job* job = jobs_.FindActive(job_id);
    if (!attempt.reattach_deadline() || !job || !IsLive(job->state())) continue;
    std::vector<std::string> missing;
    for (const auto& p : job->placement()) {
      const WorkerEntry* worker = workers_.Find(p.worker_id());
      if (!worker || worker->info.state() != v1::WORKER_STATE_BUSY ||
          worker->info.job_id() != job->id() || worker->attempt != job->attempt()) {
        missing.push_back(p.worker_id());
      }
    }
    if (missing.empty()) {
      spdlog::info("job {}: every worker reattached; it carries on after the restart", job_id);
      attempt.Reattached();
    } else if (now >= *attempt.reattach_deadline()) {
      lost.emplace_back(job_id,
                        absl::StrCat("the coordinator restarted and ",
                                     missing.size() == 1 ? "worker " : "workers ",
                                     absl::StrJoin(missing, ", "), " did not come back within ",
                                     absl::FormatDuration(options_.heartbeat_timeout)));
    }
  }
  for (const auto& [job_id, why] : lost) {
    RequeueAttempt(job_id, jobs_.FindActive(job_id)->attempt(), why);
  }
}

void Coordinator::DetachWorker(const std::string& worker_id, const WorkerConnection* connection,
                               const std::string& reason) {
  std::lock_guard<std::mutex> lock(mu_);
  auto entry = workers_.Detach(worker_id, connection);
  if (!entry) return;
  spdlog::warn("worker {} detached: {}", worker_id, reason);
  RemoveWorker(std::move(*entry), absl::StrCat("worker ", worker_id, " was lost (", reason, ")"));
  Schedule();
}

void Coordinator::RemoveWorker(WorkerEntry entry, const std::string& why) {
  if (entry.info.state() == v1::WORKER_STATE_BUSY) {
    FailAttempt(entry.info.job_id(), entry.attempt, why, /*retryable=*/true);
  }
}

void Coordinator::HandleWorkerMessage(const std::string& worker_id,
                                      const v1::WorkerMessage& message) {
  switch (message.kind_case()) {
    case v1::WorkerMessage::kHeartbeat: {
      std::lock_guard<std::mutex> lock(mu_);
      workers_.Touch(worker_id, clock_.Now());
      if (message.heartbeat().has_device_stats()) {
        if (WorkerEntry* worker = workers_.Find(worker_id)) {
          v1::DeviceStats& stats = *worker->info.mutable_device_stats();
          stats = message.heartbeat().device_stats();
          *stats.mutable_time() = ToProto(clock_.Now());
        }
      }
      break;
    }
    case v1::WorkerMessage::kStarted:
      OnTaskStarted(worker_id, message.started());
      break;
    case v1::WorkerMessage::kReport:
      OnTaskReport(worker_id, message.report());
      break;
    case v1::WorkerMessage::kFinished:
      OnTaskFinished(worker_id, message.finished());
      break;
    case v1::WorkerMessage::kLeaving:
      OnLeaving(worker_id, message.leaving());
      break;
    default:
      spdlog::warn("worker {} sent an unexpected message ({})", worker_id,
                   static_cast<int>(message.kind_case()));
  }
}

void Coordinator::OnTaskStarted(const std::string& worker_id, const v1::TaskStarted& started) {
  std::lock_guard<std::mutex> lock(mu_);
  workers_.Touch(worker_id, clock_.Now());
  WorkerEntry* worker = workers_.Find(worker_id);
  const v1::Job* job = jobs_.FindActive(started.job_id());
  if (worker && job && job->state() == v1::JOB_STATE_RUNNING &&
      job->attempt() == started.attempt() && worker->info.job_id() == started.job_id() &&
      worker->attempt == started.attempt()) {
    return;  // sent before a coordinator restart; the reattachment already said so
  }
  if (!worker || !job || worker->info.state() != v1::WORKER_STATE_BUSY ||
      worker->info.job_id() != started.job_id() || worker->attempt != started.attempt() ||
      job->attempt() != started.attempt() || job->state() != v1::JOB_STATE_SCHEDULED) {
    RefuseReport(worker_id, "started", started.job_id());
    return;
  }
  Attempt* attempt = CurrentAttempt(*job);
  if (attempt != nullptr && attempt->RankStarted(worker->info.rank())) Running(*job, *attempt);
}

void Coordinator::OnTaskReport(const std::string& worker_id, const v1::TaskReport& report) {
  std::lock_guard<std::mutex> lock(mu_);
  workers_.Touch(worker_id, clock_.Now());
  WorkerEntry* worker = workers_.Find(worker_id);
  const v1::Job* job = jobs_.FindActive(report.job_id());
  if (!worker || !job || worker->info.job_id() != report.job_id() ||
      worker->attempt != report.attempt() || job->attempt() != report.attempt()) {
    RefuseReport(worker_id, "report", report.job_id());
    return;  // a late report of an attempt already given up on, or a forged one
  }
  if (report.report_seq() > 0) {
    for (const auto& p : job->placement()) {
      // Sent again after a reattachment, and already stored: applied once only.
      if (p.rank() == worker->info.rank() && report.report_seq() <= p.last_report_seq()) return;
    }
  }
  // Diagnoses join each training sample before it is stored and streamed.
  v1::TaskReport diagnosed = report;
  if (report.dropped_samples() > 0 || report.dropped_logs() > 0) {
    // Said in the job's own log too: its watchers see where its history has a hole.
    const std::string what = absl::StrCat(
        "worker ", worker_id, " dropped ", report.dropped_samples(), " metric samples and ",
        report.dropped_logs(), " log lines (link too slow, or no coordinator for long)");
    spdlog::warn("job {}: {}", report.job_id(), what);
    diagnosed.add_logs()->set_text(what);
  }
  // A worker that claimed a GPU must show one: every training sample of a CUDA rank
  // carries the CUDA caching allocator's readings, which a process without a GPU has none
  // of. One that does not has lied about its device: its attempt fails, and it goes.
  if (worker->info.device().type() == v1::DEVICE_TYPE_CUDA) {
    for (const auto& sample : report.metrics()) {
      if (sample.has_eval() || sample.memory_reserved_bytes() > 0) continue;
      const std::string why = absl::StrCat(
          "worker ", worker_id, " claimed ", DeviceLabel(worker->info.device()),
          " but its metrics carry no CUDA memory readings; it is not trusted with GPU jobs");
      spdlog::warn("job {}: {}", report.job_id(), why);
      const uint32_t attempt = worker->attempt;
      worker->connection->Close(why);
      FailAttempt(report.job_id(), attempt, why, /*retryable=*/true);
      return;
    }
  }
  if (Attempt* attempt = CurrentAttempt(*job)) {
    const std::optional<v1::DeviceStats> device =
        worker->info.has_device_stats() ? std::make_optional(worker->info.device_stats())
                                        : std::nullopt;
    if (auto named = attempt->Diagnose(*job, worker->info.rank(), device, diagnosed)) {
      PublishStragglers(job->id(), *std::move(named));
    }
  }
  // Rank 0's first step is the job's: once per attempt.
  std::optional<v1::JobStartup> startup;
  if (report.has_startup() && worker->info.rank() == 0 && !job->has_startup()) {
    startup = JobStartupFrom(*job, report.startup());
    if (!startup) {
      spdlog::warn("job {}: worker {} reported an implausible start-up; not shown", job->id(),
                   worker_id);
    }
  }
  auto s = jobs_.AppendReport(report.job_id(), diagnosed, worker->info.rank(),
                              startup ? &*startup : nullptr);
  // Losing a batch of metrics (store full, say) must not stop training; a full telemetry
  // queue is counted on /metrics rather than said once per report.
  if (!s.ok() && !absl::IsResourceExhausted(s)) {
    spdlog::error("job {}: metrics not stored: {}", report.job_id(), s.ToString());
  }
}

void Coordinator::OnTaskFinished(const std::string& worker_id, const v1::TaskFinished& finished) {
  std::lock_guard<std::mutex> lock(mu_);
  workers_.Touch(worker_id, clock_.Now());
  WorkerEntry* worker = workers_.Find(worker_id);
  if (!worker || worker->info.job_id() != finished.job_id() ||
      worker->attempt != finished.attempt()) {
    RefuseReport(worker_id, "finished", finished.job_id());
    return;
  }
  const uint32_t rank = worker->info.rank();
  const bool was_busy = worker->info.state() == v1::WORKER_STATE_BUSY;
  workers_.MarkIdle(worker_id);
  const v1::Job* job = jobs_.FindActive(finished.job_id());
  if (!was_busy || !job || job->attempt() != finished.attempt() || !IsLive(job->state())) {
    Schedule();  // a drained device is free again
    return;
  }
  const std::string job_id = job->id();
  switch (finished.outcome()) {
    case v1::TASK_OUTCOME_SUCCEEDED: {
      Attempt* attempt = CurrentAttempt(*job);
      if (attempt != nullptr && attempt->RankSucceeded(rank)) {
        spdlog::info("job {} succeeded", job_id);
        RecordTransition(job_id, finished.attempt(), v1::JOB_STATE_SUCCEEDED,
                         finished.message().empty() ? "succeeded" : finished.message());
        EndAttempt(job_id);
      }
      break;
    }
    case v1::TASK_OUTCOME_FAILED:
      FailAttempt(job_id, finished.attempt(),
                  absl::StrCat("rank ", rank, " on ", worker_id, " failed: ", finished.message()),
                  finished.retryable());
      break;
    default:
      // The worker stopped without being told to (it is shutting down): not the job's fault.
      FailAttempt(job_id, finished.attempt(),
                  absl::StrCat("rank ", rank, " on ", worker_id, " stopped: ", finished.message()),
                  /*retryable=*/true);
  }
  Schedule();
}

void Coordinator::OnLeaving(const std::string& worker_id, const v1::Leaving& leaving) {
  std::lock_guard<std::mutex> lock(mu_);
  WorkerEntry* worker = workers_.Find(worker_id);
  if (!worker) return;
  auto entry = workers_.Detach(worker_id, worker->connection.get());
  spdlog::info("worker {} is leaving: {}", worker_id, leaving.reason());
  if (entry->info.state() == v1::WORKER_STATE_BUSY) {
    RequeueAttempt(
        entry->info.job_id(), entry->attempt,
        absl::StrCat("worker ", worker_id, " is shutting down (", leaving.reason(), ")"));
  }
  Schedule();
}

void Coordinator::RequeueAttempt(const std::string& job_id, uint32_t attempt,
                                 const std::string& why) {
  const v1::Job* job = jobs_.FindActive(job_id);
  if (shutting_down_ || !job || job->attempt() != attempt || !IsLive(job->state())) return;
  std::string message = absl::StrCat("re-queued: ", why);
  spdlog::info("job {} {}", job_id, message);
  RecordTransition(job_id, attempt, v1::JOB_STATE_PENDING, message,
                   [](v1::Job& j) { j.clear_placement(); });
  StopGang(job_id, "another rank's worker is shutting down");
}

void Coordinator::FailAttempt(const std::string& job_id, uint32_t attempt, const std::string& why,
                              bool retryable) {
  const v1::Job* job = jobs_.FindActive(job_id);
  if (shutting_down_ || !job || job->attempt() != attempt || !IsLive(job->state())) return;
  const uint32_t restarts = job->restarts();
  // The API fills max_restarts in at submission (job_spec_rules.h).
  const uint32_t max_restarts = job->spec().max_restarts();
  if (retryable && restarts < max_restarts) {
    std::string message = absl::StrCat(why, "; restart ", restarts + 1, " of ", max_restarts);
    spdlog::warn("job {}: {}", job_id, message);
    RecordTransition(job_id, attempt, v1::JOB_STATE_RESTARTING, message, [](v1::Job& j) {
      j.set_restarts(j.restarts() + 1);
      j.clear_placement();
    });
    StopGang(job_id, "another rank of this job failed");
  } else {
    std::string message =
        retryable ? absl::StrCat(why, "; no restarts left (max_restarts ", max_restarts, ")") : why;
    spdlog::warn("job {} failed: {}", job_id, message);
    RecordTransition(job_id, attempt, v1::JOB_STATE_FAILED, message);
    StopGang(job_id, "another rank of this job failed");
  }
}

void Coordinator::RecordTransition(const std::string& job_id, uint32_t attempt, v1::JobState state,
                                   const std::string& message,
                                   const std::function<void(v1::Job&)>& edit) {
  // Behind an earlier unsaved change of this job: stored after it, never before.
  const bool behind = std::any_of(unsaved_transitions_.begin(), unsaved_transitions_.end(),
                                  [&](const UnsavedTransition& t) { return t.job_id == job_id; });
  if (!behind) {
    const absl::Status s = jobs_.Transition(job_id, state, message, edit);
    if (s.ok() || absl::IsFailedPrecondition(s) || absl::IsNotFound(s)) {
      if (!s.ok()) spdlog::error("job {}: {}", job_id, s.ToString());
      return;
    }
    spdlog::error("job {}: could not store its move to {} ({}); trying again every tick", job_id,
                  StateName(state), s.ToString());
  }
  unsaved_transitions_.push_back({job_id, attempt, state, message, edit});
}

void Coordinator::RetryUnsavedTransitions() {
  std::vector<UnsavedTransition> left;
  std::set<std::string> blocked;  // jobs whose earlier change is still unsaved
  for (auto& t : unsaved_transitions_) {
    const v1::Job* job = jobs_.FindActive(t.job_id);
    if (job == nullptr || job->attempt() != t.attempt) continue;  // overtaken (cancelled, say)
    if (blocked.count(t.job_id) == 0) {
      const absl::Status s = jobs_.Transition(t.job_id, t.state, t.message, t.edit);
      if (s.ok()) {
        spdlog::info("job {}: its move to {} is stored now", t.job_id, StateName(t.state));
        continue;
      }
      if (absl::IsFailedPrecondition(s) || absl::IsNotFound(s)) continue;
    }
    blocked.insert(t.job_id);
    left.push_back(std::move(t));
  }
  unsaved_transitions_ = std::move(left);
}

void Coordinator::PublishStragglers(const std::string& job_id, std::vector<v1::Straggler> named) {
  std::lock_guard<std::mutex> lock(stragglers_mu_);
  if (named.empty()) {
    stragglers_.erase(job_id);
  } else {
    stragglers_[job_id] = std::move(named);
  }
}

v1::Job Coordinator::WithStragglers(v1::Job job) const {
  std::lock_guard<std::mutex> lock(stragglers_mu_);
  auto it = stragglers_.find(job.id());
  if (it == stragglers_.end() || IsTerminal(job.state())) return job;
  for (const v1::Straggler& s : it->second) *job.add_stragglers() = s;
  return job;
}

void Coordinator::StopGang(const std::string& job_id, const std::string& reason) {
  // The attempt ends here: a new one starts its histories afresh.
  EndAttempt(job_id);
  for (const auto& worker_id : workers_.WorkersOf(job_id)) {
    WorkerEntry* worker = workers_.Find(worker_id);
    if (!worker || worker->info.state() != v1::WORKER_STATE_BUSY) continue;
    v1::CoordinatorMessage cancel;
    cancel.mutable_cancel()->set_job_id(job_id);
    cancel.mutable_cancel()->set_attempt(worker->attempt);
    cancel.mutable_cancel()->set_reason(reason);
    worker->connection->Send(cancel);
    workers_.MarkDraining(worker_id);
  }
}

void Coordinator::GraceAfterStall(absl::Time now) {
  const absl::Duration threshold = options_.stall_threshold > absl::ZeroDuration()
                                       ? options_.stall_threshold
                                       : options_.heartbeat_timeout / 2;
  const absl::Duration gap = now - last_tick_;
  last_tick_ = now;
  if (gap <= threshold) return;
  spdlog::warn(
      "the coordinator stood still for {} (stopped, paused or starved); its workers get {} "
      "from now to be heard from before any is presumed dead",
      absl::FormatDuration(gap), absl::FormatDuration(options_.heartbeat_timeout));
  workers_.ForgiveSilence(now);
  for (auto& [job_id, attempt] : attempts_) attempt.Postpone(gap);
}

void Coordinator::Tick() {
  std::lock_guard<std::mutex> lock(mu_);
  // One reading of the clock for the whole pass: a stall that falls within it (the
  // store's writes take time) is noticed by the next pass, not blamed on the workers.
  const absl::Time now = clock_.Now();
  GraceAfterStall(now);
  RetryUnsavedTransitions();
  SettleRecoveredJobs();
  for (const auto& worker_id : workers_.Silent(now, options_.heartbeat_timeout)) {
    WorkerEntry* worker = workers_.Find(worker_id);
    const WorkerConnection* connection = worker->connection.get();
    worker->connection->Close("no heartbeat");
    auto entry = workers_.Detach(worker_id, connection);
    spdlog::warn("worker {} silent for over {}; presumed dead", worker_id,
                 absl::FormatDuration(options_.heartbeat_timeout));
    RemoveWorker(std::move(*entry),
                 absl::StrCat("worker ", worker_id, " stopped sending heartbeats"));
  }
  WithdrawUnstartedAssignments();
  Schedule();
}

void Coordinator::WithdrawUnstartedAssignments() {
  if (options_.start_timeout <= absl::ZeroDuration()) return;
  const absl::Time now = clock_.Now();
  std::vector<std::pair<std::string, uint32_t>> late;
  for (const auto& [job_id, attempt] : attempts_) {
    const v1::Job* job = jobs_.FindActive(job_id);
    if (!job || job->state() != v1::JOB_STATE_SCHEDULED || job->attempt() != attempt.number() ||
        !attempt.scheduled_at()) {
      continue;  // running, or given up on meanwhile
    }
    if (now - *attempt.scheduled_at() >= options_.start_timeout) {
      late.emplace_back(job_id, attempt.number());
    }
  }
  for (const auto& [job_id, attempt] : late) {
    const v1::Job* job = jobs_.FindActive(job_id);
    const auto it = attempts_.find(job_id);
    if (job == nullptr || it == attempts_.end()) continue;  // ended by an earlier eviction
    const Attempt& started = it->second;
    std::vector<std::string> idle;
    for (const auto& p : job->placement()) {
      if (!started.HasStarted(p.rank())) idle.push_back(p.worker_id());
    }
    const std::string why =
        absl::StrCat(idle.size() == 1 ? "worker " : "workers ", absl::StrJoin(idle, ", "),
                     " did not start it within ", absl::FormatDuration(options_.start_timeout));
    // Not the job's fault: back to the queue with no restart counted.
    RequeueAttempt(job_id, attempt, why);
    for (const auto& worker_id : idle) {
      WorkerEntry* worker = workers_.Find(worker_id);
      if (!worker) continue;
      spdlog::warn("worker {} evicted: it did not start job {} within {}", worker_id, job_id,
                   absl::FormatDuration(options_.start_timeout));
      const WorkerConnection* connection = worker->connection.get();
      worker->connection->Close(absl::StrCat("did not start job ", job_id, " within ",
                                             absl::FormatDuration(options_.start_timeout)));
      auto entry = workers_.Detach(worker_id, connection);
      if (entry) RemoveWorker(std::move(*entry), why);
    }
  }
}

// ----------------------------------------------------------------------------- scheduling

void Coordinator::Schedule() {
  if (shutting_down_) return;
  std::vector<QueuedJob> queue;
  for (const v1::Job* job : jobs_.Active()) {
    if (!IsQueued(job->state())) continue;
    QueuedJob q;
    q.id = job->id();
    q.priority = job->spec().resources().priority();
    q.order = std::stoull(job->id());
    q.devices = job->spec().resources().gpus();
    q.kind = job->spec().resources().device();
    q.queued_since = FromProto(job->queue_time());
    queue.push_back(std::move(q));
  }
  if (queue.empty()) {
    PublishWaiting({});
    return;
  }
  SchedulePlan plan =
      scheduler_.Plan(std::move(queue), workers_.FreeDevices(), workers_.Capacity(), clock_.Now());
  PublishWaiting(std::move(plan.waiting));
  if (plan.starts.empty()) return;
  // Every placement of the pass in one transaction; each is durable before any worker
  // hears of it.
  std::vector<JobBook::Change> changes;
  std::set<std::string> rendezvous_taken;  // this pass's, not yet in the job book
  for (const auto& start : plan.starts) changes.push_back(Placement(start, rendezvous_taken));
  const std::vector<absl::Status> results = jobs_.TransitionTogether(changes);
  for (size_t i = 0; i < plan.starts.size(); ++i) {
    if (!results[i].ok()) {
      spdlog::error("job {} could not be scheduled: {}", plan.starts[i].job_id,
                    results[i].ToString());
      continue;
    }
    StartJob(plan.starts[i]);
  }
}

JobBook::Change Coordinator::Placement(const PlannedStart& start,
                                       std::set<std::string>& rendezvous_taken) {
  // Ranks meet at rank 0's worker, on a port no other live job holds.
  std::string rendezvous;
  if (start.worker_ids.size() > 1) {
    rendezvous = RendezvousAddress(workers_.Find(start.worker_ids.front())->info.address(),
                                   rendezvous_taken);
    rendezvous_taken.insert(rendezvous);
  }
  std::vector<v1::Placement> placement;
  for (size_t rank = 0; rank < start.worker_ids.size(); ++rank) {
    const WorkerEntry* worker = workers_.Find(start.worker_ids[rank]);
    v1::Placement& p = placement.emplace_back();
    p.set_rank(static_cast<uint32_t>(rank));
    p.set_worker_id(worker->info.id());
    p.set_host(worker->info.host());
    *p.mutable_device() = worker->info.device();
  }
  return {start.job_id, v1::JOB_STATE_SCHEDULED,
          absl::StrCat("scheduled on ", absl::StrJoin(start.worker_ids, ", ")),
          [rendezvous, placement = std::move(placement)](v1::Job& j) {
            j.set_attempt(j.attempt() + 1);
            j.clear_startup();  // the new attempt's, once it has stepped
            j.set_rendezvous_address(rendezvous);
            j.clear_placement();
            for (const auto& p : placement) *j.add_placement() = p;
          }};
}

void Coordinator::StartJob(const PlannedStart& start) {
  const std::string where = absl::StrJoin(start.worker_ids, ", ");
  const v1::Job* job = jobs_.FindActive(start.job_id);
  attempts_.insert_or_assign(
      job->id(),
      Attempt(job->attempt(), static_cast<uint32_t>(start.worker_ids.size()), clock_.Now()));
  spdlog::info("job {} attempt {} scheduled on {}", job->id(), job->attempt(), where);
  v1::CodeBundle code;
  if (const std::string digest = spec::CodeDigestOf(job->spec()); !digest.empty()) {
    auto stored = store_.GetCode(digest);
    // Without it the trainer fails the attempt, saying the code is missing.
    if (!stored.ok() || !code.ParseFromString(*stored)) {
      spdlog::error("job {}: its code (sha256 {}) cannot be read from the store: {}", job->id(),
                    digest, stored.ok() ? "unparsable" : stored.status().ToString());
      code.Clear();
    }
  }
  for (size_t rank = 0; rank < start.worker_ids.size(); ++rank) {
    WorkerEntry* worker = workers_.Find(start.worker_ids[rank]);
    workers_.MarkBusy(worker->info.id(), job->id(), job->attempt(), static_cast<uint32_t>(rank));
    v1::CoordinatorMessage message;
    v1::Assignment* a = message.mutable_assignment();
    a->set_job_id(job->id());
    a->set_attempt(job->attempt());
    *a->mutable_spec() = job->spec();
    a->set_rank(static_cast<uint32_t>(rank));
    a->set_world_size(static_cast<uint32_t>(start.worker_ids.size()));
    a->set_job_dir(absl::StrCat(options_.jobs_dir, "/", job->id()));
    a->set_rendezvous_address(job->rendezvous_address());
    a->set_advertise_address(worker->info.address());
    for (const auto& root : options_.data_roots) a->add_data_roots(root);
    if (code.files_size() > 0) *a->mutable_code() = code;
    worker->connection->Send(message);
  }
}

std::string Coordinator::RendezvousAddress(const std::string& host, std::set<std::string> taken) {
  for (const v1::Job* job : jobs_.Active()) {
    if (IsLive(job->state()) && !job->rendezvous_address().empty()) {
      taken.insert(job->rendezvous_address());
    }
  }
  const int span = options_.last_rendezvous_port - options_.first_rendezvous_port + 1;
  // IPv6 literals need brackets before the port.
  const std::string prefix =
      host.find(':') != std::string::npos ? absl::StrCat("[", host, "]") : host;
  std::string candidate;
  for (int i = 0; i < span; ++i) {
    const int port = options_.first_rendezvous_port + (next_rendezvous_port_++ % span);
    candidate = absl::StrCat(prefix, ":", port);
    if (!taken.count(candidate)) break;
  }
  return candidate;
}

void Coordinator::PublishWaiting(std::map<std::string, std::string> waiting) {
  auto shared = std::make_shared<const std::map<std::string, std::string>>(std::move(waiting));
  std::lock_guard<std::mutex> lock(waiting_mu_);
  waiting_ = std::move(shared);
}

v1::Job Coordinator::WithWaitingReason(v1::Job job) const {
  if (!IsQueued(job.state())) return job;
  std::shared_ptr<const std::map<std::string, std::string>> waiting;
  {
    std::lock_guard<std::mutex> lock(waiting_mu_);
    waiting = waiting_;
  }
  if (auto it = waiting->find(job.id()); it != waiting->end()) {
    job.set_message(job.message().empty() ? it->second
                                          : absl::StrCat(job.message(), "; ", it->second));
  }
  return job;
}

}  // namespace stoke::server
