// The coordinator's core: its start (recovering jobs from the store) and stop, the public
// API's flows, and the background pass. The worker link, an attempt's end and the
// scheduling pass are in coordinator_workers.cc, coordinator_attempts.cc and
// coordinator_scheduling.cc.
#include "server/core/coordinator.h"

#include <spdlog/spdlog.h>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "spec/code_bundle.h"

namespace stoke::server {

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
      last_tick_(clock.Now()),
      fair_share_(options_.fair_share_half_life),
      fair_share_charged_to_(clock.Now()),
      log_budget_(options_.log_limits) {}

Coordinator::~Coordinator() { Stop(); }

absl::Status Coordinator::Start() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto s = jobs_.Recover(); !s.ok()) return s;
    spdlog::info("recovered {} unfinished jobs from the store", jobs_.Active().size());
    RecallFairShare();
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
    if (options_.max_job_bytes_per_owner > 0) {
      disk_quota_watch_ = std::thread([this] { DiskQuotaLoop(); });
    }
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
  if (disk_quota_watch_.joinable()) disk_quota_watch_.join();
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
  if (auto over = OverDiskQuota(owner)) return absl::ResourceExhaustedError(*over);
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

absl::StatusOr<const v1::Job*> Coordinator::Unfinished(const std::string& id) const {
  if (const v1::Job* job = jobs_.FindActive(id)) return job;
  auto stored = jobs_.Get(id);
  if (!stored.ok()) return stored.status();
  return absl::FailedPreconditionError(
      absl::StrCat("job ", id, " has already finished (", StateName(stored->state()), ")"));
}

absl::StatusOr<v1::Job> Coordinator::CancelJob(const std::string& id, const std::string& reason) {
  std::lock_guard<std::mutex> lock(mu_);
  auto unfinished = Unfinished(id);
  if (!unfinished.ok()) return unfinished.status();
  const v1::Job* job = *unfinished;
  const bool was_live = IsLive(job->state());
  std::string message = reason.empty() ? "cancelled" : absl::StrCat("cancelled: ", reason);
  if (auto s = jobs_.Transition(id, v1::JOB_STATE_CANCELLED, message); !s.ok()) return s;
  spdlog::info("job {} {}", id, message);
  if (was_live) StopGang(id, message);
  Schedule();  // also forgets why the job was waiting
  return jobs_.Get(id);
}

absl::StatusOr<v1::Job> Coordinator::SetJobPriority(const std::string& id, int32_t priority,
                                                    const std::string& by) {
  std::lock_guard<std::mutex> lock(mu_);
  auto unfinished = Unfinished(id);
  if (!unfinished.ok()) return unfinished.status();
  const int32_t before = (*unfinished)->spec().resources().priority();
  const std::string note = absl::StrCat("priority changed from ", before, " to ", priority,
                                        by.empty() ? "" : " by ", by);
  if (auto s = jobs_.Amend(id, note,
                           [priority](v1::Job& j) {
                             j.mutable_spec()->mutable_resources()->set_priority(priority);
                           });
      !s.ok()) {
    return s;
  }
  spdlog::info("job {}: {}", id, note);
  Schedule();
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
  cluster.set_preemptions(preemptions_);
  cluster.set_preemption_lost_seconds(preemption_lost_seconds_);
  DescribeSharing(cluster);
  cluster.set_telemetry_events_dropped(telemetry_->dropped());
  cluster.set_telemetry_events_queued(telemetry_->queued());
  for (const auto& [state, count] : jobs_.finished()) {
    (*cluster.mutable_jobs_finished())[absl::AsciiStrToLower(StateName(state))] = count;
  }
  return cluster;
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
  SettleReattachments();
  for (const auto& worker_id : workers_.Silent(now, options_.heartbeat_timeout)) {
    WorkerEntry* worker = workers_.Find(worker_id);
    const WorkerConnection* connection = worker->connection.get();
    worker->connection->Close("no heartbeat");
    auto entry = workers_.Detach(worker_id, connection);
    spdlog::warn("worker {} silent for over {}; presumed dead", worker_id,
                 absl::FormatDuration(options_.heartbeat_timeout));
    RemoveWorker(*entry, absl::StrCat("worker ", worker_id, " stopped sending heartbeats"));
  }
  WithdrawUnstartedAssignments();
  CancelLatePreemptions(now);
  AccrueFairShare(now);
  Schedule();
}

}  // namespace stoke::server
