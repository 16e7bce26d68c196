// When each queued job will start: the scheduler itself (scheduler.h: its order, gangs,
// backfill and reservations) played forward in time on the devices as jobs free them. A
// running job frees its devices after its remaining steps at its measured step time; a
// queued job holds the devices it gets for its steps at the step time of its own earlier
// attempt or of the latest job of the same shape, which is all a prediction at submit
// time can know. A job whose devices come free only after a job of unknown length has no
// prediction. Pure: no I/O, no clock.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "server/core/scheduler.h"

namespace stoke::server {

struct BusyDevices {
  v1::DeviceType type = v1::DEVICE_TYPE_CPU;
  uint32_t devices = 1;
  // How much longer it holds them; nullopt: unknown (no step measured yet).
  std::optional<absl::Duration> remaining;
};

struct WaitingJob {
  QueuedJob job;
  // How long it will hold its devices once started; nullopt: unknown.
  std::optional<absl::Duration> duration;
};

struct StartPrediction {
  uint32_t position = 0;  // 1 for the next to start
  std::optional<absl::Time> start;
};

// `queue` in the scheduler's order; `idle`: devices free now, by type; `capacity`: all
// attached devices, by type.
std::map<std::string, StartPrediction> PredictStarts(const Scheduler& scheduler,
                                                     const std::vector<WaitingJob>& queue,
                                                     const std::vector<BusyDevices>& running,
                                                     const DeviceCapacity& idle,
                                                     const DeviceCapacity& capacity,
                                                     absl::Time now);

}  // namespace stoke::server
