#include "server/core/attempt.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <string>

namespace stoke::server {

Attempt::Attempt(uint32_t number, uint32_t ranks, absl::Time scheduled_at)
    : number_(number), ranks_(ranks), scheduled_at_(scheduled_at) {
  if (ranks > 1) stragglers_.emplace(ranks);
}

Attempt Attempt::Recovered(const v1::Job& job, absl::Time now, absl::Time reattach_by) {
  Attempt attempt(job.attempt(), static_cast<uint32_t>(job.placement_size()), now);
  // A running attempt's ranks have all started; the new coordinator only lost count.
  if (job.state() == v1::JOB_STATE_RUNNING) {
    attempt.scheduled_at_.reset();
    for (const auto& p : job.placement()) attempt.started_.insert(p.rank());
  }
  attempt.AwaitReattach(reattach_by, Absence::kCoordinatorRestarted);
  return attempt;
}

void Attempt::AwaitReattach(absl::Time deadline, Absence why) {
  if (reattach_deadline_) return;
  reattach_deadline_ = deadline;
  absence_ = why;
}

bool Attempt::RankStarted(uint32_t rank) {
  const bool added = started_.insert(rank).second;
  return added && started_.size() == ranks_;
}

bool Attempt::RankSucceeded(uint32_t rank) {
  const bool added = succeeded_.insert(rank).second;
  return added && succeeded_.size() == ranks_;
}

void Attempt::Postpone(absl::Duration gap) {
  if (scheduled_at_) *scheduled_at_ += gap;
  if (reattach_deadline_) *reattach_deadline_ += gap;
  if (preemption_) preemption_->ordered_at += gap;
}

void Attempt::Preempt(absl::Time ordered_at, std::string why) {
  preemption_ = Preemption{ordered_at, std::move(why)};
}

bool Attempt::RankStopped(uint32_t rank) {
  const bool added = stopped_.insert(rank).second;
  return added && stopped_.size() == ranks_;
}

std::optional<std::vector<v1::Straggler>> Attempt::Diagnose(
    const v1::Job& job, uint32_t rank, const std::optional<v1::DeviceStats>& device,
    v1::TaskReport& report) {
  RankDiagnostician& diagnostician = diagnosticians_[rank];
  bool changed = false;
  for (auto& sample : *report.mutable_metrics()) {
    if (sample.has_eval()) continue;
    for (v1::Diagnosis d : diagnostician.Diagnose(sample, device)) sample.add_diagnoses(d);
    if (!stragglers_) continue;
    const StragglerWatch::Change change = stragglers_->Add(rank, sample);
    if (change.any()) {
      changed = true;
      for (const v1::Straggler& s : stragglers_->Named(job)) {
        if (std::find(change.named.begin(), change.named.end(), s.rank()) == change.named.end()) {
          continue;
        }
        spdlog::warn("job {}: {}", job.id(), s.summary());
        report.add_logs()->set_text(s.summary());
      }
      for (uint32_t cleared : change.cleared) {
        const std::string text = stragglers_->DescribeRecovery(job, cleared);
        spdlog::info("job {}: {}", job.id(), text);
        report.add_logs()->set_text(text);
      }
    }
    // Every rank's step waits for the straggler: each rank's sample says the job has one.
    if (stragglers_->any()) sample.add_diagnoses(v1::DIAGNOSIS_STRAGGLER);
  }
  if (!changed) return std::nullopt;
  return stragglers_->Named(job);
}

}  // namespace stoke::server
