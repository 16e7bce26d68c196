// The coordinator's handling of an attempt's end: re-queued through no fault of the job,
// failed (restarted while restarts last), its gang stopped; and the state changes its
// workers bring about, kept and retried when the store cannot take them.
#include "server/core/coordinator.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace stoke::server {

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

void Coordinator::RequeueAttempt(const std::string& job_id, uint32_t attempt,
                                 const std::string& why) {
  const v1::Job* job = jobs_.FindActive(job_id);
  if (shutting_down_ || !job || job->attempt() != attempt || !IsLive(job->state())) return;
  if (const Attempt* current = CurrentAttempt(*job); current && current->preemption()) {
    FinishPreemption(job_id, attempt, absl::StrCat("it stopped early: ", why));
    return;
  }
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
  // A rank that fails while its gang is being preempted (another rank stopped first, and
  // a collective broke) costs the job no restart: the job stops, as it was asked to.
  if (const Attempt* current = CurrentAttempt(*job); current && current->preemption()) {
    FinishPreemption(job_id, attempt, absl::StrCat("it stopped early: ", why));
    return;
  }
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

void Coordinator::RecordTransition(const std::string& id, uint32_t attempt, v1::JobState state,
                                   const std::string& message,
                                   const std::function<void(v1::Job&)>& edit) {
  // `id` may be the job's own field, which storing the notice below replaces.
  const std::string job_id = id;
  // The attempt's end: lines dropped and not yet said are said before it.
  for (const v1::LogLine& notice : log_budget_.Finish(job_id)) {
    if (auto s = jobs_.Amend(job_id, notice.text(), [](v1::Job&) {}); !s.ok()) {
      spdlog::warn("job {}: {}", job_id, s.ToString());
    }
  }
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

}  // namespace stoke::server
