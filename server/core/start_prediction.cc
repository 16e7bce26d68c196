#include "server/core/start_prediction.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace stoke::server {
namespace {

// One device in the played-forward cluster, named by its index.
struct SimulatedDevice {
  v1::DeviceType type;
  absl::Time free_at;  // InfiniteFuture: after a job of unknown length
};

}  // namespace

std::map<std::string, StartPrediction> PredictStarts(const Scheduler& scheduler,
                                                     const std::vector<WaitingJob>& queue,
                                                     const std::vector<BusyDevices>& running,
                                                     const DeviceCapacity& idle,
                                                     const DeviceCapacity& capacity,
                                                     absl::Time now) {
  std::vector<SimulatedDevice> devices;
  for (const auto& [type, n] : idle) devices.insert(devices.end(), n, {type, now});
  for (const BusyDevices& job : running) {
    const absl::Time at = job.remaining ? now + *job.remaining : absl::InfiniteFuture();
    devices.insert(devices.end(), job.devices, {job.type, at});
  }
  std::map<std::string, StartPrediction> predictions;
  std::map<std::string, std::optional<absl::Duration>> durations;
  std::vector<QueuedJob> pending;
  for (const WaitingJob& w : queue) {
    predictions[w.job.id].position = static_cast<uint32_t>(pending.size() + 1);
    durations[w.job.id] = w.duration;
    pending.push_back(w.job);
  }
  // Each pass starts what the scheduler would at `t`, then moves to the next moment a
  // device comes free; every pass starts a job or frees a device, so this ends.
  absl::Time t = now;
  const size_t passes = 2 * (queue.size() + devices.size()) + 1;
  for (size_t pass = 0; !pending.empty() && pass < passes; ++pass) {
    std::vector<FreeDevice> free;
    for (size_t i = 0; i < devices.size(); ++i) {
      if (devices[i].free_at <= t) {
        free.push_back({absl::StrCat(i), "simulated", devices[i].type, static_cast<uint32_t>(i)});
      }
    }
    const SchedulePlan plan = scheduler.Plan(pending, free, capacity, t);
    for (const PlannedStart& start : plan.starts) {
      predictions[start.job_id].start = t;
      const auto& duration = durations[start.job_id];
      const absl::Time end = duration ? t + *duration : absl::InfiniteFuture();
      for (const std::string& device : start.worker_ids) devices[std::stoul(device)].free_at = end;
      pending.erase(std::find_if(pending.begin(), pending.end(),
                                 [&](const QueuedJob& q) { return q.id == start.job_id; }));
    }
    absl::Time next = absl::InfiniteFuture();
    for (const SimulatedDevice& d : devices) {
      if (d.free_at > t) next = std::min(next, d.free_at);
    }
    if (next == absl::InfiniteFuture()) break;
    t = next;
  }
  return predictions;
}

}  // namespace stoke::server
