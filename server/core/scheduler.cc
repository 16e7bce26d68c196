#include "server/core/scheduler.h"

#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"

namespace stoke::server {
namespace {

const char* TypeName(v1::DeviceType type) { return type == v1::DEVICE_TYPE_CUDA ? "GPU" : "CPU"; }

std::string Devices(uint32_t n, v1::DeviceType type) {
  return absl::StrCat(n, " ", TypeName(type), n == 1 ? " device" : " devices");
}

// Takes n devices out of `pool`: all from one host when a host has enough (the one with
// the fewest free that still fits, keeping roomier hosts for larger jobs), otherwise from
// the hosts with the most free devices first, so the job spans as few hosts as it can.
std::vector<FreeDevice> TakeDevices(std::vector<FreeDevice>& pool, uint32_t n) {
  std::map<std::string, std::vector<size_t>> by_host;
  for (size_t i = 0; i < pool.size(); ++i) by_host[pool[i].host].push_back(i);

  std::vector<std::pair<std::string, std::vector<size_t>>> hosts(by_host.begin(), by_host.end());
  const std::pair<std::string, std::vector<size_t>>* best_fit = nullptr;
  for (const auto& host : hosts) {
    if (host.second.size() >= n && (!best_fit || host.second.size() < best_fit->second.size())) {
      best_fit = &host;
    }
  }
  std::vector<size_t> chosen;
  if (best_fit) {
    chosen.assign(best_fit->second.begin(), best_fit->second.begin() + n);
  } else {
    std::stable_sort(hosts.begin(), hosts.end(), [](const auto& a, const auto& b) {
      return a.second.size() > b.second.size();
    });
    for (const auto& host : hosts) {
      for (size_t i : host.second) {
        if (chosen.size() == n) break;
        chosen.push_back(i);
      }
    }
  }
  std::vector<FreeDevice> taken;
  for (size_t i : chosen) taken.push_back(pool[i]);
  // Remove from the back so earlier indices stay valid.
  std::sort(chosen.rbegin(), chosen.rend());
  for (size_t i : chosen) pool.erase(pool.begin() + static_cast<std::ptrdiff_t>(i));
  std::stable_sort(taken.begin(), taken.end(), [](const FreeDevice& a, const FreeDevice& b) {
    return std::tie(a.host, a.index) < std::tie(b.host, b.index);
  });
  return taken;
}

}  // namespace

v1::DeviceType Scheduler::ResolveType(v1::DeviceKind kind, const DeviceCapacity& capacity) {
  switch (kind) {
    case v1::DEVICE_KIND_CUDA:
      return v1::DEVICE_TYPE_CUDA;
    case v1::DEVICE_KIND_CPU:
      return v1::DEVICE_TYPE_CPU;
    default: {
      auto cuda = capacity.find(v1::DEVICE_TYPE_CUDA);
      return cuda != capacity.end() && cuda->second > 0 ? v1::DEVICE_TYPE_CUDA
                                                        : v1::DEVICE_TYPE_CPU;
    }
  }
}

void Scheduler::Order(std::vector<QueuedJob>& queue, absl::Time now) const {
  const absl::Duration starvation = options_.starvation_age;
  std::stable_sort(queue.begin(), queue.end(), [&](const QueuedJob& a, const QueuedJob& b) {
    if (a.within_guarantee != b.within_guarantee) return a.within_guarantee;
    if (a.priority != b.priority) return a.priority > b.priority;
    const bool a_starved = now - a.queued_since >= starvation;
    const bool b_starved = now - b.queued_since >= starvation;
    if (a_starved != b_starved) return a_starved;
    if (a_starved && a.queued_since != b.queued_since) return a.queued_since < b.queued_since;
    if (a.owner_use != b.owner_use) return a.owner_use < b.owner_use;
    return a.order < b.order;
  });
}

SchedulePlan Scheduler::Plan(std::vector<QueuedJob> queue, const std::vector<FreeDevice>& free,
                             const DeviceCapacity& capacity, absl::Time now) const {
  Order(queue, now);
  std::map<v1::DeviceType, std::vector<FreeDevice>> pools;
  for (const auto& device : free) pools[device.type].push_back(device);
  // Device types held for a job that has waited past the backfill window.
  std::map<v1::DeviceType, std::string> reserved_for;

  SchedulePlan plan;
  for (const auto& job : queue) {
    v1::DeviceType type = ResolveType(job.kind, capacity);
    auto cap = capacity.find(type);
    uint32_t total = cap == capacity.end() ? 0 : cap->second;
    if (job.devices > total) {
      // It cannot run until more workers attach; it must not hold up jobs that can.
      plan.waiting[job.id] =
          absl::StrCat("needs ", Devices(job.devices, type), "; the cluster has ", total);
      continue;
    }
    if (auto r = reserved_for.find(type); r != reserved_for.end()) {
      plan.waiting[job.id] = absl::StrCat("queued behind job ", r->second);
      continue;
    }
    auto& pool = pools[type];
    if (pool.size() >= job.devices) {
      PlannedStart start{job.id, {}};
      for (const auto& device : TakeDevices(pool, job.devices)) {
        start.worker_ids.push_back(device.worker_id);
      }
      plan.starts.push_back(std::move(start));
      continue;
    }
    plan.waiting[job.id] =
        absl::StrCat("waiting for ", Devices(job.devices, type), " (", pool.size(), " free)");
    if (now - job.queued_since >= options_.backfill_window) reserved_for[type] = job.id;
  }
  return plan;
}

}  // namespace stoke::server
