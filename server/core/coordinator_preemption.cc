// The coordinator's preemptions: after a scheduling pass, jobs of higher priority that
// still wait may stop preemptible jobs of lower priority (preemption.h chooses them). A
// victim's ranks stop at a step boundary with a checkpoint of that step, and the job goes
// back to the queue as PREEMPTED, to resume from that step; one that has not stopped
// within the grace is cancelled, to resume from its newest checkpoint.
// A worker shutting down with a grace (SIGTERM) has its job preempted the same way.
#include <spdlog/spdlog.h>

#include <cmath>
#include <set>

#include "absl/strings/str_cat.h"
#include "server/common/time_util.h"
#include "server/core/coordinator.h"
#include "server/core/preemption.h"
#include "spec/preemptible.h"

namespace stoke::server {
namespace {

// The step after which the ranks of a job of several stop: far enough ahead of the newest
// step reported that every rank hears of it before getting there (reports lag by up to a
// metrics interval, a message by a moment), so that they all stop after the same step.
uint64_t AgreedStopStep(const v1::Job& job) {
  const v1::MetricSample& latest = job.latest_metrics();
  const uint64_t interval = std::max<uint32_t>(1, job.spec().metrics().interval_steps());
  uint64_t ahead = 2 * interval;
  if (latest.step_seconds() > 0) {
    // Two seconds of steps covers a report's age (a worker sends every 200 ms), the
    // message's way and the rank's reading of it, with room to spare.
    ahead = std::max(ahead, static_cast<uint64_t>(std::ceil(2.0 / latest.step_seconds())));
  }
  return latest.step() + ahead;
}

}  // namespace

void Coordinator::PreemptForWaiting(const std::vector<QueuedJob>& waiting,
                                    const DeviceCapacity& free) {
  if (waiting.empty()) return;
  const DeviceCapacity capacity = workers_.Capacity();
  const std::set<std::string> borrowing = options_.quotas.Borrowing(HeldByRunningJobs());
  std::vector<RunningJob> running;
  for (const v1::Job* job : jobs_.Active()) {
    if (!IsLive(job->state()) || job->placement_size() == 0) continue;
    const Attempt* attempt = CurrentAttempt(*job);
    if (attempt == nullptr) continue;
    const v1::ResourceSpec& resources = job->spec().resources();
    RunningJob& r = running.emplace_back();
    r.id = job->id();
    r.priority = resources.priority();
    r.preemptible = spec::IsPreemptible(resources);
    r.protected_job = resources.has_preemptible() && !resources.preemptible();
    r.borrowing = borrowing.count(job->id()) > 0;
    r.guaranteed = !options_.quotas.empty() && !r.borrowing;
    if (const QuotaGroup* group = options_.quotas.GroupOf(job->owner())) r.group = group->name;
    r.devices = static_cast<uint32_t>(job->placement_size());
    r.type = job->placement(0).device().type();
    r.since = FromProto(job->start_time());
    r.stopping = attempt->preemption().has_value();
  }
  for (const PlannedPreemption& p : PlanPreemptions(waiting, running, free, capacity)) {
    const v1::Job* victim = jobs_.FindActive(p.victim);
    const v1::Job* for_job = jobs_.FindActive(p.for_job);
    if (victim != nullptr && for_job != nullptr) OrderPreemption(*victim, *for_job);
  }
}

void Coordinator::OrderPreemption(const v1::Job& victim, const v1::Job& for_job) {
  OrderPreemption(victim, absl::StrCat("for job ", for_job.id()),
                  absl::StrCat("job ", for_job.id(), " (priority ",
                               for_job.spec().resources().priority(), ") needs its devices"));
}

void Coordinator::OrderPreemption(const v1::Job& victim, std::string why,
                                  const std::string& reason) {
  Attempt* attempt = CurrentAttempt(victim);
  if (attempt == nullptr) return;
  attempt->Preempt(clock_.Now(), std::move(why));
  ++preemptions_;
  const uint64_t after_step = victim.placement_size() > 1 ? AgreedStopStep(victim) : 0;
  spdlog::info(
      "job {} attempt {}: preempting it: {}; stopping after {}", victim.id(), victim.attempt(),
      reason,
      after_step == 0 ? std::string("the step under way") : absl::StrCat("step ", after_step));
  for (const auto& placement : victim.placement()) {
    WorkerEntry* worker = workers_.Find(placement.worker_id());
    if (worker == nullptr || worker->info.job_id() != victim.id()) continue;
    v1::CoordinatorMessage message;
    v1::PreemptTask* preempt = message.mutable_preempt();
    preempt->set_job_id(victim.id());
    preempt->set_attempt(victim.attempt());
    preempt->set_after_step(after_step);
    preempt->set_reason(reason);
    worker->connection->Send(message);
  }
}

void Coordinator::FinishPreemption(const std::string& job_id, uint32_t attempt_number,
                                   const std::string& how) {
  const v1::Job* job = jobs_.FindActive(job_id);
  if (job == nullptr || job->attempt() != attempt_number) return;
  const Attempt* attempt = CurrentAttempt(*job);
  if (attempt == nullptr || !attempt->preemption()) return;
  const Attempt::Preemption preemption = *attempt->preemption();
  const double lost = absl::ToDoubleSeconds(clock_.Now() - preemption.ordered_at) *
                      std::max(1, job->placement_size());
  preemption_lost_seconds_ += lost;
  const std::string message =
      absl::StrCat("preempted ", preemption.why, ": ", how, "; queued again");
  spdlog::info("job {} {}", job_id, message);
  RecordTransition(job_id, attempt_number, v1::JOB_STATE_PREEMPTED, message, [lost](v1::Job& j) {
    j.set_preemptions(j.preemptions() + 1);
    j.set_preemption_lost_seconds(j.preemption_lost_seconds() + lost);
    j.clear_placement();
  });
  StopGang(job_id, "the job was preempted");
}

void Coordinator::CancelLatePreemptions(absl::Time now) {
  std::vector<std::pair<std::string, uint32_t>> late;
  for (const auto& [job_id, attempt] : attempts_) {
    if (attempt.preemption() &&
        now - attempt.preemption()->ordered_at >= options_.preemption_grace) {
      late.emplace_back(job_id, attempt.number());
    }
  }
  for (const auto& [job_id, attempt] : late) {
    FinishPreemption(job_id, attempt,
                     absl::StrCat("it did not stop at a step boundary within ",
                                  absl::FormatDuration(options_.preemption_grace),
                                  ", so it was cancelled and resumes from its newest checkpoint"));
  }
}

}  // namespace stoke::server
