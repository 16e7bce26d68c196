// The coordinator's worker link: registrations (and a worker's id bound to its live
// connection), reattachment after a coordinator restart, the messages a rank sends about
// its task, and workers lost, leaving or never starting what they were given.
#include "server/core/coordinator.h"

#include <spdlog/spdlog.h>

#include <optional>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "security/token_hash.h"
#include "server/common/device_label.h"
#include "server/common/time_util.h"
#include "server/core/job_startup.h"

namespace stoke::server {
namespace {

// The worker as a registration describes it; `address` is where it connected from.
v1::Worker WorkerFrom(const v1::RegisterWorker& registration, const std::string& address) {
  v1::Worker info;
  info.set_id(registration.worker_id());
  info.set_host(registration.host());
  *info.mutable_device() = registration.device();
  info.set_local(registration.local());
  info.set_pid(registration.pid());
  info.set_version(registration.version());
  info.set_address(registration.advertise_address().empty() ? address
                                                            : registration.advertise_address());
  return info;
}

}  // namespace

absl::Status Coordinator::AdmitRegistration(const v1::RegisterWorker& registration,
                                            const std::string& credential) {
  if (registration.worker_id().empty()) {
    return absl::InvalidArgumentError("register.worker_id: must not be empty");
  }
  if (registration.device().type() == v1::DEVICE_TYPE_UNSPECIFIED) {
    return absl::InvalidArgumentError("register.device.type: must be CPU or CUDA");
  }
  if (credential.empty()) return absl::OkStatus();
  // Checked before anything changes: a process that may not take this id must not evict
  // the worker that holds it.
  auto bound = store_.BindWorkerCredential(registration.worker_id(), credential);
  if (!bound.ok()) return bound.status();
  if (*bound != credential) {
    return absl::PermissionDeniedError(absl::StrCat(
        "register.worker_id: ", registration.worker_id(),
        " is bound to another credential; a worker keeps the id it first registered with"));
  }
  return absl::OkStatus();
}

absl::Status Coordinator::RefuseFoundOutGpu(const v1::RegisterWorker& registration) {
  if (registration.device().type() != v1::DEVICE_TYPE_CUDA) return absl::OkStatus();
  auto it = distrusted_gpu_workers_.find(registration.worker_id());
  if (it == distrusted_gpu_workers_.end()) return absl::OkStatus();
  if (clock_.Now() >= it->second) {
    distrusted_gpu_workers_.erase(it);
    return absl::OkStatus();
  }
  return absl::PermissionDeniedError(absl::StrCat(
      "register.device: worker ", registration.worker_id(),
      " claimed a GPU its metrics showed it lacks; it may register with one again after ",
      absl::FormatTime("%Y-%m-%d %H:%M:%S UTC", it->second, absl::UTCTimeZone())));
}

absl::Status Coordinator::RefuseWhileHeld(const std::string& worker_id) {
  // An id is its live connection's: a second registration (with any credential) waits
  // until the holder has gone silent for three heartbeats. A worker reconnecting after its
  // own stream broke gets in once the coordinator has noticed; a process that merely holds
  // a credential cannot knock a training worker off its job.
  const WorkerEntry* holder = workers_.Find(worker_id);
  if (holder == nullptr) return absl::OkStatus();
  const absl::Duration silent = clock_.Now() - holder->last_seen;
  if (silent >= 3 * options_.heartbeat_interval) return absl::OkStatus();
  return absl::AlreadyExistsError(
      absl::StrCat("register.worker_id: ", worker_id, " is attached and was heard from ",
                   absl::FormatDuration(absl::Trunc(silent, absl::Milliseconds(100))),
                   " ago; a second registration waits until it has been silent for ",
                   absl::FormatDuration(3 * options_.heartbeat_interval)));
}

absl::Status Coordinator::RefuseWhileAwaited(const v1::RegisterWorker& registration) const {
  // After a coordinator restart (or a broken link), any process holding a worker
  // credential could register a training worker's id first, and take its job; the worker
  // that still runs the task proves it is the one by its task's key.
  const v1::HeldTask& held = registration.held_task();
  for (const auto& [job_id, attempt] : attempts_) {
    if (!attempt.reattach_deadline()) continue;
    const v1::Job* job = jobs_.FindActive(job_id);
    if (job == nullptr || !IsLive(job->state())) continue;
    for (const auto& p : job->placement()) {
      // A rank not yet started holds nothing to take: its id may register afresh.
      if (p.worker_id() != registration.worker_id() || p.task_key_sha256().empty() ||
          !attempt.HasStarted(p.rank())) {
        continue;
      }
      const bool holds_it =
          registration.has_held_task() && held.job_id() == job_id &&
          held.attempt() == job->attempt() && held.rank() == p.rank() &&
          security::ConstantTimeEquals(security::HashToken(held.task_key()), p.task_key_sha256());
      if (holds_it) return absl::OkStatus();
      return absl::AlreadyExistsError(absl::StrCat(
          "register.worker_id: ", registration.worker_id(), " runs rank ", p.rank(), " of job ",
          job_id, ", which waits until ",
          absl::FormatTime("%H:%M:%S UTC", *attempt.reattach_deadline(), absl::UTCTimeZone()),
          " for it to come back holding the task (and its key); another registration of the "
          "id waits until then"));
    }
  }
  return absl::OkStatus();
}

void Coordinator::ReplaceWorkerProcess(const WorkerEntry& replaced, const v1::HeldTask* held) {
  replaced.connection->Close("replaced by a new registration of the same worker");
  // The same process on a new stream, still on its task: nothing was lost.
  const bool same_task = held != nullptr && replaced.info.state() != v1::WORKER_STATE_IDLE &&
                         replaced.info.job_id() == held->job_id() &&
                         replaced.attempt == held->attempt();
  // The silent holder's job goes back to the queue without a restart counted against it:
  // its worker's process was replaced, which is no fault of the job.
  if (!same_task && replaced.info.state() == v1::WORKER_STATE_BUSY) {
    RequeueAttempt(replaced.info.job_id(), replaced.attempt,
                   absl::StrCat("worker ", replaced.info.id(),
                                " registered again; its previous process is gone"));
  }
}

absl::Status Coordinator::AttachWorker(const v1::RegisterWorker& registration,
                                       const std::string& address,
                                       const std::shared_ptr<WorkerConnection>& connection,
                                       const std::string& credential) {
  if (auto s = AdmitRegistration(registration, credential); !s.ok()) return s;
  std::lock_guard<std::mutex> lock(mu_);
  if (auto s = RefuseFoundOutGpu(registration); !s.ok()) return s;
  if (auto s = RefuseWhileHeld(registration.worker_id()); !s.ok()) return s;
  if (auto s = RefuseWhileAwaited(registration); !s.ok()) return s;
  auto replaced = workers_.Attach(WorkerFrom(registration, address), connection, clock_.Now());
  const v1::HeldTask* held = registration.has_held_task() ? &registration.held_task() : nullptr;
  if (replaced) ReplaceWorkerProcess(*replaced, held);
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
    ReleaseAwaitedPlacements(registration.worker_id());
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

void Coordinator::ReleaseAwaitedPlacements(const std::string& worker_id) {
  std::vector<std::tuple<std::string, uint32_t, Attempt::Absence>> lost;
  for (const auto& [job_id, attempt] : attempts_) {
    const v1::Job* job = jobs_.FindActive(job_id);
    if (!attempt.reattach_deadline() || !job || !IsLive(job->state())) continue;
    for (const auto& p : job->placement()) {
      if (p.worker_id() == worker_id) lost.emplace_back(job_id, job->attempt(), attempt.absence());
    }
  }
  for (const auto& [job_id, attempt, absence] : lost) {
    AbandonAwaitedAttempt(
        job_id, attempt, absence,
        absl::StrCat("worker ", worker_id, " came back without the job (its process restarted)"));
  }
}

void Coordinator::AbandonAwaitedAttempt(const std::string& job_id, uint32_t attempt,
                                        Attempt::Absence absence, const std::string& what) {
  if (absence == Attempt::Absence::kCoordinatorRestarted || !AnyRankStarted(job_id, attempt)) {
    RequeueAttempt(job_id, attempt, absl::StrCat("the coordinator restarted and ", what));
  } else {
    FailAttempt(job_id, attempt, absl::StrCat("its link broke and ", what), /*retryable=*/true);
  }
}

void Coordinator::SettleReattachments() {
  const absl::Time now = clock_.Now();
  std::vector<std::tuple<std::string, Attempt::Absence, std::string>> lost;  // job, why
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
      spdlog::info("job {}: every worker is back; it carries on", job_id);
      attempt.Reattached();
    } else if (now >= *attempt.reattach_deadline()) {
      lost.emplace_back(job_id, attempt.absence(),
                        absl::StrCat(missing.size() == 1 ? "worker " : "workers ",
                                     absl::StrJoin(missing, ", "), " did not come back within ",
                                     absl::FormatDuration(options_.heartbeat_timeout)));
    }
  }
  for (const auto& [job_id, absence, why] : lost) {
    AbandonAwaitedAttempt(job_id, jobs_.FindActive(job_id)->attempt(), absence, why);
  }
}

void Coordinator::DetachWorker(const std::string& worker_id, const WorkerConnection* connection,
                               const std::string& reason, bool may_reconnect) {
  std::lock_guard<std::mutex> lock(mu_);
  auto entry = workers_.Detach(worker_id, connection);
  if (!entry) return;
  spdlog::warn("worker {} detached: {}", worker_id, reason);
  const v1::Job* job = entry->info.state() == v1::WORKER_STATE_BUSY
                           ? jobs_.FindActive(entry->info.job_id())
                           : nullptr;
  Attempt* attempt = job != nullptr && IsLive(job->state()) ? CurrentAttempt(*job) : nullptr;
  if (may_reconnect && !shutting_down_ && attempt != nullptr &&
      attempt->number() == entry->attempt) {
    // A broken link is not a dead worker: one that trains on reconnects holding its task
    // (a network blip, or a coordinator that stood still past the worker's keepalive).
    // Its attempt fails only if it is not back within the heartbeat timeout.
    attempt->AwaitReattach(clock_.Now() + options_.heartbeat_timeout, Attempt::Absence::kLinkLost);
    spdlog::info("job {}: waiting up to {} for worker {} to reconnect holding it", job->id(),
                 absl::FormatDuration(options_.heartbeat_timeout), worker_id);
    return;
  }
  RemoveWorker(*entry, absl::StrCat("worker ", worker_id, " was lost (", reason, ")"));
  Schedule();
}

void Coordinator::RemoveWorker(const WorkerEntry& entry, const std::string& why) {
  if (entry.info.state() != v1::WORKER_STATE_BUSY) return;
  // A worker lost before its task started training cost the job nothing but the wait: no
  // restart is counted (a process that takes assignments and vanishes could otherwise
  // use up any job's restarts).
  if (!AnyRankStarted(entry.info.job_id(), entry.attempt)) {
    RequeueAttempt(entry.info.job_id(), entry.attempt,
                   absl::StrCat(why, " before the attempt started"));
    return;
  }
  FailAttempt(entry.info.job_id(), entry.attempt, why, /*retryable=*/true);
}

bool Coordinator::AnyRankStarted(const std::string& job_id, uint32_t attempt_number) {
  const v1::Job* job = jobs_.FindActive(job_id);
  const Attempt* attempt = job != nullptr ? CurrentAttempt(*job) : nullptr;
  // (A running attempt recovered after a restart counts every rank as started.)
  return attempt == nullptr || attempt->number() != attempt_number || attempt->AnyStarted();
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

bool Coordinator::ClaimsAGpuItLacks(WorkerEntry& worker, const v1::TaskReport& report) {
  // Every training sample of a CUDA rank carries the CUDA caching allocator's readings,
  // which a process without a GPU has none of. One that does not has lied about its
  // device: it goes, and may not claim a GPU again for an hour. Its attempt goes back to
  // the queue with no restart counted: the job did nothing wrong, and a fake that came
  // back again and again must not use up its restarts.
  if (worker.info.device().type() != v1::DEVICE_TYPE_CUDA) return false;
  for (const auto& sample : report.metrics()) {
    if (sample.has_eval() || sample.memory_reserved_bytes() > 0) continue;
    const std::string why = absl::StrCat(
        "worker ", worker.info.id(), " claimed ", DeviceLabel(worker.info.device()),
        " but its metrics carry no CUDA memory readings; it is not trusted with GPU jobs");
    spdlog::warn("job {}: {}", report.job_id(), why);
    const uint32_t attempt = worker.attempt;
    worker.connection->Close(why);
    distrusted_gpu_workers_[worker.info.id()] = clock_.Now() + kGpuDistrust;
    RequeueAttempt(report.job_id(), attempt, why);
    return true;
  }
  return false;
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
  if (ClaimsAGpuItLacks(*worker, report)) return;
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
  // What the job printed, within its log budget; what is over it is dropped and said.
  LogBudget::Admitted logs =
      log_budget_.Admit(job->id(), job->log_bytes(), clock_.Now(), diagnosed.logs());
  if (logs.dropped_lines > 0 || logs.lines.size() != static_cast<size_t>(diagnosed.logs_size())) {
    diagnosed.clear_logs();
    for (v1::LogLine& line : logs.lines) {
      line.set_rank(worker->info.rank());
      *diagnosed.add_logs() = std::move(line);
    }
  }
  if (worker->info.rank() == 0) NoteStepTime(*job, report);
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
    case v1::TASK_OUTCOME_PREEMPTED: {
      Attempt* attempt = CurrentAttempt(*job);
      if (attempt == nullptr || !attempt->preemption()) {
        // Ordered by a coordinator that has since restarted: back to the queue all the same.
        RequeueAttempt(job_id, finished.attempt(),
                       absl::StrCat("rank ", rank, " on ", worker_id, ": ", finished.message()));
      } else if (attempt->RankStopped(rank)) {
        FinishPreemption(job_id, finished.attempt(), finished.message());
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
  if (leaving.stop_grace_ms() > 0 && PreemptForLeaving(*worker, leaving.reason())) return;
  auto entry = workers_.Detach(worker_id, worker->connection.get());
  spdlog::info("worker {} is leaving: {}", worker_id, leaving.reason());
  if (entry->info.state() == v1::WORKER_STATE_BUSY) {
    RequeueAttempt(
        entry->info.job_id(), entry->attempt,
        absl::StrCat("worker ", worker_id, " is shutting down (", leaving.reason(), ")"));
  }
  Schedule();
}

bool Coordinator::PreemptForLeaving(WorkerEntry& worker, const std::string& reason) {
  if (worker.info.state() != v1::WORKER_STATE_BUSY) return false;
  const v1::Job* job = jobs_.FindActive(worker.info.job_id());
  if (job == nullptr || job->attempt() != worker.attempt || !IsLive(job->state())) return false;
  const Attempt* attempt = CurrentAttempt(*job);
  if (attempt == nullptr) return false;
  // It stays attached, given no more work, until its task's outcome is in and it closes.
  workers_.MarkLeaving(worker.info.id());
  spdlog::info("worker {} is leaving ({}); job {} stops at a step boundary first", worker.info.id(),
               reason, job->id());
  if (!attempt->preemption()) {
    OrderPreemption(*job, absl::StrCat("because worker ", worker.info.id(), " shut down"),
                    absl::StrCat("worker ", worker.info.id(), " is shutting down (", reason, ")"));
  }
  Schedule();
  return true;
}

void Coordinator::RefuseReport(const std::string& worker_id, const char* kind,
                               const std::string& job_id) {
  ++refused_reports_;
  spdlog::warn("worker {}: {} for job {} refused: the job's current attempt is not assigned to it",
               worker_id, kind, job_id);
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
      if (entry) RemoveWorker(*entry, why);
    }
  }
}

}  // namespace stoke::server
