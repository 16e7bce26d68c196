#include "server/core/diagnosis.h"

namespace stoke::server {

std::vector<v1::Diagnosis> RankDiagnostician::Diagnose(
    const v1::MetricSample& sample, const std::optional<v1::DeviceStats>& device) {
  std::vector<v1::Diagnosis> out;
  if (sample.data_wait_ratio() > thresholds_.input_bound_data_wait) {
    out.push_back(v1::DIAGNOSIS_INPUT_BOUND);
  }
  // Only where the FLOP/s are known against a peak (bf16 on a known GPU), and the GPU
  // says how busy it is.
  if (device && device->source() == "nvml" && sample.mfu() > 0 &&
      device->utilization() >= thresholds_.launch_bound_utilization &&
      sample.mfu() < thresholds_.launch_bound_mfu) {
    out.push_back(v1::DIAGNOSIS_LAUNCH_BOUND);
  }
  if (sample.memory_allocated_bytes() > 0) {
    allocated_.push_back(sample.memory_allocated_bytes());
    const size_t window = static_cast<size_t>(thresholds_.memory_growing_samples) + 1;
    while (allocated_.size() > window) allocated_.pop_front();
    bool rising = allocated_.size() == window;
    for (size_t i = 1; rising && i < allocated_.size(); ++i) {
      rising = allocated_[i] > allocated_[i - 1];
    }
    if (rising) out.push_back(v1::DIAGNOSIS_MEMORY_GROWING);
  }
  return out;
}

}  // namespace stoke::server
