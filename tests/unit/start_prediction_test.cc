// Start-time prediction: the scheduler played forward on the devices as running jobs free
// them, gangs waiting for their last device, backfill while a gang is young, and no guess
// where a length is unknown.
#include "server/core/start_prediction.h"

#include <gtest/gtest.h>

namespace stoke::server {
namespace {

const absl::Time kNow = absl::FromUnixSeconds(3'000'000);
constexpr auto kGpu = v1::DEVICE_TYPE_CUDA;

WaitingJob Job(const std::string& id, uint32_t devices, std::optional<int> minutes,
               absl::Duration waited = absl::ZeroDuration()) {
  QueuedJob job;
  job.id = id;
  job.order = std::stoull(id);
  job.devices = devices;
  job.kind = v1::DEVICE_KIND_CUDA;
  job.queued_since = kNow - waited;
  std::optional<absl::Duration> duration;
  if (minutes) duration = absl::Minutes(*minutes);
  return {job, duration};
}

BusyDevices Busy(uint32_t devices, std::optional<int> minutes_left) {
  BusyDevices busy{kGpu, devices, std::nullopt};
  if (minutes_left) busy.remaining = absl::Minutes(*minutes_left);
  return busy;
}

std::map<std::string, StartPrediction> Predict(const std::vector<WaitingJob>& queue,
                                               const std::vector<BusyDevices>& running,
                                               uint32_t idle) {
  uint32_t total = idle;
  for (const auto& r : running) total += r.devices;
  return PredictStarts(Scheduler(Scheduler::Options{}), queue, running, {{kGpu, idle}},
                       {{kGpu, total}}, kNow);
}

absl::Duration StartsIn(const std::map<std::string, StartPrediction>& p, const std::string& id) {
  EXPECT_TRUE(p.at(id).start.has_value()) << id;
  return p.at(id).start.value_or(kNow) - kNow;
}

TEST(StartPrediction, TheSchedulerIsPlayedForwardAsDevicesComeFree) {
  // Two GPUs: one free now, one busy for 3 more minutes.
  const auto p = Predict({Job("1", 1, 1), Job("2", 2, 5), Job("3", 1, 30)}, {Busy(1, 3)}, 1);
  EXPECT_EQ(p.at("1").position, 1u);
  EXPECT_EQ(StartsIn(p, "1"), absl::ZeroDuration());
  // At 1 minute the first is done; the gang of two still lacks a device, and, as it has
  // waited less than the backfill window, the single job behind it takes the free one.
  EXPECT_EQ(StartsIn(p, "3"), absl::Minutes(1));
  EXPECT_EQ(StartsIn(p, "2"), absl::Minutes(31));
  EXPECT_EQ(p.at("3").position, 3u);
}

TEST(StartPrediction, AGangThatHasWaitedPastTheBackfillWindowIsNotPassed) {
  const auto p =
      Predict({Job("1", 1, 1), Job("2", 2, 5, absl::Minutes(5)), Job("3", 1, 30)}, {Busy(1, 3)}, 1);
  EXPECT_EQ(StartsIn(p, "2"), absl::Minutes(3));
  EXPECT_EQ(StartsIn(p, "3"), absl::Minutes(8));
}

TEST(StartPrediction, NoGuessBehindAJobOfUnknownLengthOrForAJobLargerThanTheCluster) {
  const auto p =
      Predict({Job("1", 1, std::nullopt), Job("2", 1, 5), Job("3", 1, 5), Job("4", 9, 5)},
              {Busy(1, std::nullopt)}, 1);
  EXPECT_EQ(StartsIn(p, "1"), absl::ZeroDuration()) << "it starts now; its end is unknown";
  EXPECT_FALSE(p.at("2").start.has_value()) << "both devices free at unknown times";
  EXPECT_FALSE(p.at("4").start.has_value());
  EXPECT_EQ(p.at("4").position, 4u);
}

}  // namespace
}  // namespace stoke::server
