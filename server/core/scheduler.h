// The scheduling policy, kept free of state and I/O so it can be tested exhaustively:
// given the queue and the free devices, which jobs start now and on which devices.
//
// Order: higher priority first, then submission order. A job asking for N devices
// starts only when N devices of one type are free (gang). While the first blocked job
// has waited less than the backfill window, later jobs that fit may start on the free
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
};

struct FreeDevice {
  std::string worker_id;
  std::string host;
  v1::DeviceType type = v1::DEVICE_TYPE_CPU;
  uint32_t index = 0;
};

// Attached devices of each type, busy or not.
using DeviceCapacity = std::map<v1::DeviceType, uint32_t>;

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
  };

  explicit Scheduler(Options options) : options_(options) {}

  SchedulePlan Plan(std::vector<QueuedJob> queue, const std::vector<FreeDevice>& free,
                    const DeviceCapacity& capacity, absl::Time now) const;

  // Sorts `queue` into the order jobs are considered in: higher priority first, then
  // submission order.
  static void Order(std::vector<QueuedJob>& queue);

  // The device type a job of this kind runs on in a cluster of this capacity: CUDA when
  // it asks for it or asks for any and the cluster has GPUs, CPU otherwise.
  static v1::DeviceType ResolveType(v1::DeviceKind kind, const DeviceCapacity& capacity);

 private:
  Options options_;
};

}  // namespace stoke::server
