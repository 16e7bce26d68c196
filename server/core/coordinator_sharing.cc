// The coordinator's share of a cluster among owners: what each quota group holds, each
// owner's fair-share use (charged as jobs run, recalled from the store at start), and
// how both are shown.
#include <spdlog/spdlog.h>

#include "server/common/time_util.h"
#include "server/core/coordinator.h"

namespace stoke::server {
namespace {

// Stored jobs read at start to recall fair share: the newest this many.
constexpr uint32_t kRecalledJobs = 10'000;

}  // namespace

std::vector<HeldDevices> Coordinator::HeldByRunningJobs() const {
  std::vector<HeldDevices> held;
  for (const v1::Job* job : jobs_.Active()) {
    if (!IsLive(job->state()) || job->placement_size() == 0) continue;
    held.push_back({job->id(), job->owner(), job->placement(0).device().type(),
                    static_cast<uint32_t>(job->placement_size()), FromProto(job->start_time())});
  }
  return held;
}

void Coordinator::AccrueFairShare(absl::Time now) {
  const double seconds = absl::ToDoubleSeconds(now - fair_share_charged_to_);
  if (seconds <= 0) return;
  for (const v1::Job* job : jobs_.Active()) {
    if (IsLive(job->state())) {
      fair_share_.Accrue(job->owner(), seconds * job->placement_size(), now);
    }
  }
  fair_share_charged_to_ = now;
}

void Coordinator::RecallFairShare() {
  // A job's attempts but the last are not kept apart: its devices from its last start to
  // its end stand for its use, which is close for most jobs and never too much.
  const absl::Time now = clock_.Now();
  const absl::Time horizon = now - 8 * options_.fair_share_half_life;
  JobQuery query;
  query.limit = kRecalledJobs;
  auto page = store_.ListJobs(query);
  if (!page.ok()) {
    spdlog::warn("fair share starts from nothing: the store's jobs cannot be read: {}",
                 page.status().ToString());
    return;
  }
  for (const v1::Job& job : page->jobs) {
    if (!job.has_start_time()) continue;
    const absl::Time start = FromProto(job.start_time());
    const absl::Time end = job.has_end_time() ? FromProto(job.end_time()) : now;
    if (end < horizon || end <= start) continue;
    const uint32_t devices = std::max(1u, job.spec().resources().gpus());
    fair_share_.Accrue(job.owner(), absl::ToDoubleSeconds(end - start) * devices, end);
  }
  fair_share_charged_to_ = now;
}

void Coordinator::DescribeSharing(v1::Cluster& cluster) const {
  const absl::Time now = clock_.Now();
  const auto use = options_.quotas.Use(HeldByRunningJobs());
  for (const QuotaGroup& group : options_.quotas.groups()) {
    v1::QuotaUse* q = cluster.add_quotas();
    q->set_group(group.name);
    for (const auto& owner : group.owners) q->add_owners(owner);
    q->set_guaranteed_gpus(CountOf(group.guaranteed, v1::DEVICE_TYPE_CUDA));
    q->set_guaranteed_cpus(CountOf(group.guaranteed, v1::DEVICE_TYPE_CPU));
    if (auto held = use.find(group.name); held != use.end()) {
      q->set_used_gpus(CountOf(held->second, v1::DEVICE_TYPE_CUDA));
      q->set_used_cpus(CountOf(held->second, v1::DEVICE_TYPE_CPU));
    }
  }
  std::map<std::string, v1::OwnerUse> owners;
  for (const auto& [owner, device_seconds] : fair_share_.UseByOwner(now)) {
    owners[owner].set_recent_device_hours(device_seconds / 3600);
  }
  for (const v1::Job* job : jobs_.Active()) {
    v1::OwnerUse& o = owners[job->owner()];
    if (IsQueued(job->state())) {
      o.set_queued_jobs(o.queued_jobs() + 1);
    } else {
      o.set_running_jobs(o.running_jobs() + 1);
    }
  }
  for (auto& [owner, o] : owners) {
    o.set_owner(owner);
    if (const QuotaGroup* group = options_.quotas.GroupOf(owner)) o.set_group(group->name);
    *cluster.add_owners() = std::move(o);
  }
}

}  // namespace stoke::server
