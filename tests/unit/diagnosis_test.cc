// The guides' diagnoses from samples and device readings.
#include "server/core/diagnosis.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace stoke::server {
namespace {

v1::MetricSample Sample(double data_wait, double mfu, uint64_t allocated) {
  v1::MetricSample s;
  s.set_data_wait_ratio(data_wait);
  s.set_mfu(mfu);
  s.set_memory_allocated_bytes(allocated);
  return s;
}

v1::DeviceStats Gpu(double utilization) {
  v1::DeviceStats d;
  d.set_utilization(utilization);
  d.set_source("nvml");
  return d;
}

bool Contains(const std::vector<v1::Diagnosis>& ds, v1::Diagnosis d) {
  return std::find(ds.begin(), ds.end(), d) != ds.end();
}

TEST(Diagnosis, InputBoundWhenTheLoopWaitsForDataBeyondTheThreshold) {
  RankDiagnostician rank;
  EXPECT_FALSE(Contains(rank.Diagnose(Sample(0.05, 0.4, 0), Gpu(0.5)), v1::DIAGNOSIS_INPUT_BOUND));
  EXPECT_TRUE(Contains(rank.Diagnose(Sample(0.30, 0.4, 0), Gpu(0.5)), v1::DIAGNOSIS_INPUT_BOUND));
}

TEST(Diagnosis, LaunchBoundWhenTheGpuIsBusyButAchievesLittle) {
  RankDiagnostician rank;
  EXPECT_TRUE(Contains(rank.Diagnose(Sample(0, 0.03, 0), Gpu(0.98)), v1::DIAGNOSIS_LAUNCH_BOUND));
  // Busy and efficient; or idle-ish; or FLOP/s unknown; or no NVML: not launch-bound.
  EXPECT_FALSE(Contains(rank.Diagnose(Sample(0, 0.45, 0), Gpu(0.98)), v1::DIAGNOSIS_LAUNCH_BOUND));
  EXPECT_FALSE(Contains(rank.Diagnose(Sample(0, 0.03, 0), Gpu(0.40)), v1::DIAGNOSIS_LAUNCH_BOUND));
  EXPECT_FALSE(Contains(rank.Diagnose(Sample(0, 0.0, 0), Gpu(0.98)), v1::DIAGNOSIS_LAUNCH_BOUND));
  EXPECT_FALSE(
      Contains(rank.Diagnose(Sample(0, 0.03, 0), std::nullopt), v1::DIAGNOSIS_LAUNCH_BOUND));
}

TEST(Diagnosis, MemoryGrowingAfterFiveRisesInARowAndNotAfterAPlateau) {
  RankDiagnostician rank;
  std::vector<bool> flagged;
  for (uint64_t bytes : {100, 110, 120, 130, 140, 150, 150, 160}) {
    flagged.push_back(
        Contains(rank.Diagnose(Sample(0, 0, bytes), std::nullopt), v1::DIAGNOSIS_MEMORY_GROWING));
  }
  EXPECT_EQ(flagged, (std::vector<bool>{false, false, false, false, false, true, false, false}));
}

}  // namespace
}  // namespace stoke::server
