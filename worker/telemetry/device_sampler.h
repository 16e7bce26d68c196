// What the device a worker trains on is doing, sampled by a background thread once a
// second, never from the training loop. GPUs through NVML (libnvidia-ml, opened with
// dlopen at run time, so a worker built with CUDA still starts where there is no driver,
// and CPU-only machines need nothing): utilization, memory, SM clock, power, temperature.
// CPU workers report what /proc says of their own process: the share of the machine's
// cores it keeps busy, its resident memory against the machine's, and the cores' clock.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "worker/common/task.h"

namespace stoke::worker {

struct DeviceStats {
  double utilization = 0;  // 0 to 1
  uint64_t memory_used_bytes = 0;
  uint64_t memory_total_bytes = 0;
  std::optional<double> sm_clock_hz;
  std::optional<double> power_watts;
  std::optional<double> temperature_celsius;
  std::string source;  // "nvml" or "procfs"
};

// One reading; implementations keep what they need between readings (CPU times).
class DeviceProbe {
 public:
  virtual ~DeviceProbe() = default;
  // Null when this device cannot be read here (no NVML, an unknown UUID); `why` says why.
  static std::unique_ptr<DeviceProbe> For(const DeviceInfo& device, std::string* why);
  virtual std::optional<DeviceStats> Read() = 0;
};

class DeviceSampler {
 public:
  // Starts sampling every `period`; a device that cannot be read yields no stats.
  DeviceSampler(const DeviceInfo& device, std::chrono::milliseconds period);
  ~DeviceSampler();
  DeviceSampler(const DeviceSampler&) = delete;
  DeviceSampler& operator=(const DeviceSampler&) = delete;

  // The newest reading, if any yet.
  std::optional<DeviceStats> Latest() const;
  // Why there are no readings, when there cannot be.
  const std::string& unavailable_reason() const { return why_; }

 private:
  void Loop(std::chrono::milliseconds period);

  std::unique_ptr<DeviceProbe> probe_;
  std::string why_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::optional<DeviceStats> latest_;
  std::thread thread_;
};

}  // namespace stoke::worker
