// The scheduling policy, kept free of state and I/O so it can be tested exhaustively:
// given the queue and the free devices, which jobs start now and on which devices.
//
// Order: a job its group's guarantee covers (quotas.h) first, since devices reclaimed for
// it must go to it; then higher priority. Among equal priorities: one that has waited
// past the starvation age, oldest first; then the owner with the least recent use
// (fair_share.h); then submission order, so one owner's jobs go in the order they came. A job
// asking for N devices starts only when N devices of one type are free (gang). While the first
// blocked job has waited less than the backfill window, later jobs that fit may start on the free
// devices (keeping GPUs busy); once its wait passes the window, nothing behind it starts
// on that device type until it has run, so small jobs cannot starve a large one forever.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "stoke/v1/job.pb.h"
#include "stoke/v1/job_spec.pb.h"

namespace stoke::server {

struct QueuedJob {
  std::string id;
  int32_t priority = 0;
  uint64_t order = 0;  // submission order (the numeric job id)
  uint32_t devices = 1;
  v1::DeviceKind kind = v1::DEVICE_KIND_UNSPECIFIED;
  absl::Time queued_since;
  // Who submitted it, and their recent use in decayed device-seconds (fair share).
  std::string owner;
  double owner_use = 0;
  // Starting it keeps its owner's group within its guaranteed devices (quotas), and the
  // group's name ("": none).
  bool within_guarantee = false;
  std::string group;
};

struct FreeDevice {
  std::string worker_id;
  std::string host;
  v1::DeviceType type = v1::DEVICE_TYPE_CPU;
  uint32_t index = 0;
};

// Attached devices of each type, busy or not.
using DeviceCapacity = std::map<v1::DeviceType, uint32_t>;

// The devices of `type` in `devices` (0 when it has none).
inline uint32_t CountOf(const DeviceCapacity& devices, v1::DeviceType type) {
  auto it = devices.find(type);
  return it == devices.end() ? 0 : it->second;
}

struct PlannedStart {
  std::string job_id;
  // worker_ids[r] runs rank r; ranks on one host are contiguous.
  std::vector<std::string> worker_ids;
};

struct SchedulePlan {
  std::vector<PlannedStart> starts;
  // Why each job that stays queued waits, for users to read.
  std::map<std::string, std::string> waiting;
};

class Scheduler {
 public:
  struct Options {
    absl::Duration backfill_window = absl::Minutes(2);
    // A job queued this long goes ahead of owners' fair share (among equal priorities),
    // so that a busy owner's job is not passed over forever.
    absl::Duration starvation_age = absl::Hours(1);
  };

  explicit Scheduler(Options options) : options_(options) {}

  SchedulePlan Plan(std::vector<QueuedJob> queue, const std::vector<FreeDevice>& free,
                    const DeviceCapacity& capacity, absl::Time now) const;

  // Sorts `queue` into the order jobs are considered in (above), as of `now`.
  void Order(std::vector<QueuedJob>& queue, absl::Time now) const;

  // The device type a job of this kind runs on in a cluster of this capacity: CUDA when
  // it asks for it or asks for any and the cluster has GPUs, CPU otherwise.
  static v1::DeviceType ResolveType(v1::DeviceKind kind, const DeviceCapacity& capacity);

 private:
  Options options_;
};

}  // namespace stoke::server
