#include "server/core/straggler_watch.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "server/common/device_label.h"

namespace stoke::server {
namespace {

std::string Who(const v1::Straggler& s) {
  if (s.worker_id().empty()) return absl::StrCat("rank ", s.rank());
  return absl::StrCat("rank ", s.rank(), " (worker ", s.worker_id(), " on ", s.host(), ", ",
                      DeviceLabel(s.device()), ")");
}

// `rank` with where it runs in `job`.
v1::Straggler Located(const v1::Job& job, uint32_t rank) {
  v1::Straggler s;
  s.set_rank(rank);
  for (const auto& p : job.placement()) {
    if (p.rank() != rank) continue;
    s.set_worker_id(p.worker_id());
    s.set_host(p.host());
    *s.mutable_device() = p.device();
  }
  return s;
}

std::map<uint32_t, v1::StragglerCause> Causes(const StragglerState& state) {
  std::map<uint32_t, v1::StragglerCause> causes;
  for (const auto& [rank, r] : state.ranks) {
    if (r.named) causes[rank] = r.cause;
  }
  return causes;
}

}  // namespace

StragglerWatch::Change StragglerWatch::Add(uint32_t rank, const v1::MetricSample& sample) {
  Change change;
  if (world_size_ < 2 || rank >= world_size_) return change;
  StepWindow& window = pending_[sample.step()];
  window.step = sample.step();
  window.ranks[rank] = {sample.step_seconds(), sample.comm_wait_ratio()};
  if (window.ranks.size() < world_size_) {
    while (pending_.size() > kMaxPendingSteps) pending_.erase(pending_.begin());
    return change;
  }
  const auto before = Causes(state_);
  state_ = NextStragglerState(std::move(state_), window, world_size_, thresholds_);
  // Each rank reports its steps in order: an older step still missing a rank never
  // completes.
  pending_.erase(pending_.begin(), pending_.upper_bound(window.step));
  const auto after = Causes(state_);
  for (const auto& [r, cause] : after) {
    auto was = before.find(r);
    if (was == before.end() || was->second != cause) change.named.push_back(r);
  }
  for (const auto& [r, cause] : before) {
    if (after.count(r) == 0) change.cleared.push_back(r);
  }
  return change;
}

bool StragglerWatch::any() const {
  return std::any_of(state_.ranks.begin(), state_.ranks.end(),
                     [](const auto& rank) { return rank.second.named; });
}

std::vector<v1::Straggler> StragglerWatch::Named(const v1::Job& job) const {
  std::vector<v1::Straggler> named = NamedStragglers(state_);
  for (v1::Straggler& s : named) {
    v1::Straggler located = Located(job, s.rank());
    located.MergeFrom(s);
    s = std::move(located);
    s.set_summary(DescribeStraggler(s));
  }
  return named;
}

std::string DescribeStraggler(const v1::Straggler& s) {
  const int64_t percent = std::llround(s.excess() * 100);
  if (s.cause() == v1::STRAGGLER_CAUSE_ALLREDUCE) {
    return absl::StrCat(Who(s), " is a straggler: it waits in gradient all-reduce ", percent,
                        "% of the step longer than its peers (", s.windows(),
                        " windows), its compute normal; suspect its link");
  }
  return absl::StrCat(Who(s), " is a straggler: its compute takes ", percent,
                      "% longer than its peers' (", s.windows(),
                      " windows); the others wait for it in all-reduce");
}

std::string StragglerWatch::DescribeRecovery(const v1::Job& job, uint32_t rank) const {
  return absl::StrCat(Who(Located(job, rank)),
                      " is no longer a straggler: ", thresholds_.windows_to_clear,
                      " windows in step with its peers");
}

}  // namespace stoke::server
