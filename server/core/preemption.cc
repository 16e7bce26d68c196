#include "server/core/preemption.h"

#include <algorithm>
#include <map>
#include <tuple>

namespace stoke::server {
namespace {

// Whether `victim` may be stopped for `job`.
bool MayPreempt(const RunningJob& victim, const QueuedJob& job) {
  if (victim.preemptible && victim.priority < job.priority &&
      (!victim.guaranteed || victim.group == job.group)) {
    return true;
  }
  return job.within_guarantee && victim.borrowing && !victim.protected_job;
}

// Victims for `job`, needing `need` more devices of `type`, from `candidates` (in the
// order they are taken); empty when they cannot free enough.
std::vector<const RunningJob*> ChooseVictims(const std::vector<const RunningJob*>& candidates,
                                             const QueuedJob& job, v1::DeviceType type,
                                             uint32_t need) {
  std::vector<const RunningJob*> chosen;
  uint32_t freed = 0;
  for (const RunningJob* victim : candidates) {
    if (freed >= need) break;
    if (victim->type != type || !MayPreempt(*victim, job)) continue;
    chosen.push_back(victim);
    freed += victim->devices;
  }
  if (freed < need) return {};
  // Spare those a later, larger victim made unnecessary: the last taken stays (it was
  // needed to reach `need`), earlier ones go if the rest still cover it.
  for (size_t i = chosen.size(); i-- > 1;) {
    const uint32_t without = freed - chosen[i - 1]->devices;
    if (without >= need) {
      freed = without;
      chosen.erase(chosen.begin() + static_cast<std::ptrdiff_t>(i - 1));
    }
  }
  return chosen;
}

}  // namespace

std::vector<PlannedPreemption> PlanPreemptions(const std::vector<QueuedJob>& waiting,
                                               const std::vector<RunningJob>& running,
                                               const DeviceCapacity& free,
                                               const DeviceCapacity& capacity) {
  // Devices a waiting job can count on without preempting anyone: free now, or freed by
  // jobs already stopping. Each job served takes its share, so that two waiting jobs do
  // not both count on the same devices.
  DeviceCapacity available = free;
  std::vector<const RunningJob*> candidates;
  for (const RunningJob& job : running) {
    if (job.stopping) {
      available[job.type] += job.devices;
    } else if (job.preemptible || job.borrowing) {
      candidates.push_back(&job);
    }
  }
  std::stable_sort(candidates.begin(), candidates.end(),
                   [](const RunningJob* a, const RunningJob* b) {
                     return std::make_tuple(a->priority, -absl::ToUnixNanos(a->since), a->devices) <
                            std::make_tuple(b->priority, -absl::ToUnixNanos(b->since), b->devices);
                   });

  std::vector<PlannedPreemption> plan;
  for (const QueuedJob& job : waiting) {
    const v1::DeviceType type = Scheduler::ResolveType(job.kind, capacity);
    if (job.devices > CountOf(capacity, type)) continue;  // no preemption makes it fit
    uint32_t& ready = available[type];
    if (ready >= job.devices) {
      ready -= job.devices;  // it starts once they are free
      continue;
    }
    const std::vector<const RunningJob*> victims =
        ChooseVictims(candidates, job, type, job.devices - ready);
    if (victims.empty()) continue;
    uint32_t freed = 0;
    for (const RunningJob* victim : victims) {
      plan.push_back({victim->id, job.id});
      freed += victim->devices;
      candidates.erase(std::find(candidates.begin(), candidates.end(), victim));
    }
    ready = ready + freed - job.devices;
  }
  return plan;
}

}  // namespace stoke::server
