// The guides' diagnoses, from what the coordinator sees of a job: its metric samples and
// the device readings of the rank that sent them. Pure functions of that history, so
// they are tested without a cluster.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <vector>

#include "stoke/v1/job.pb.h"

namespace stoke::server {

struct DiagnosisThresholds {
  double input_bound_data_wait = 0.10;
  double launch_bound_utilization = 0.90;
  double launch_bound_mfu = 0.10;
  int memory_growing_samples = 5;  // consecutive rises
};

// One rank's history; feed it that rank's samples in order.
class RankDiagnostician {
 public:
  explicit RankDiagnostician(DiagnosisThresholds thresholds = {}) : thresholds_(thresholds) {}
  // The diagnoses for `sample` (a training sample, not an evaluation), given the rank's
  // device readings at the time, if any.
  std::vector<v1::Diagnosis> Diagnose(const v1::MetricSample& sample,
                                      const std::optional<v1::DeviceStats>& device);

 private:
  DiagnosisThresholds thresholds_;
  std::deque<uint64_t> allocated_;  // memory_allocated_bytes of the latest samples
};

}  // namespace stoke::server
