#include "worker/telemetry/device_sampler.h"

namespace stoke::worker {

std::unique_ptr<DeviceProbe> MakeNvmlProbe(const DeviceInfo& device, std::string* why);
std::unique_ptr<DeviceProbe> MakeProcfsProbe();

std::unique_ptr<DeviceProbe> DeviceProbe::For(const DeviceInfo& device, std::string* why) {
  if (device.device.kind == DeviceKind::kCuda) return MakeNvmlProbe(device, why);
  return MakeProcfsProbe();
}

DeviceSampler::DeviceSampler(const DeviceInfo& device, std::chrono::milliseconds period)
    : probe_(DeviceProbe::For(device, &why_)) {
  if (!probe_) return;
  probe_->Read();  // primes the CPU probe's time base
  thread_ = std::thread([this, period] { Loop(period); });
}

DeviceSampler::~DeviceSampler() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::optional<DeviceStats> DeviceSampler::Latest() const {
  std::lock_guard<std::mutex> lock(mu_);
  return latest_;
}

void DeviceSampler::Loop(std::chrono::milliseconds period) {
  std::unique_lock<std::mutex> lock(mu_);
  while (!cv_.wait_for(lock, period, [this] { return stopping_; })) {
    lock.unlock();
    std::optional<DeviceStats> stats = probe_->Read();
    lock.lock();
    if (stats) latest_ = std::move(stats);
  }
}

}  // namespace stoke::worker
