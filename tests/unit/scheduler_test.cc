// The scheduling policy: priority then FIFO, gangs all-or-nothing, backfill only while
// the blocked job is young, and devices of one host preferred.
#include "server/core/scheduler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <map>

namespace stoke::server {
namespace {

const absl::Time kNow = absl::FromUnixSeconds(1'000'000);

QueuedJob Job(const std::string& id, uint32_t devices, int priority = 0,
              absl::Duration waited = absl::ZeroDuration()) {
  QueuedJob job;
  job.id = id;
  job.order = std::stoull(id);
  job.devices = devices;
  job.priority = priority;
  job.queued_since = kNow - waited;
  return job;
}

std::vector<FreeDevice> CpuDevices(int n, const std::string& host = "h1") {
  std::vector<FreeDevice> devices;
  for (int i = 0; i < n; ++i) {
    devices.push_back(
        {host + "/cpu:" + std::to_string(i), host, v1::DEVICE_TYPE_CPU, static_cast<uint32_t>(i)});
  }
  return devices;
}

std::vector<std::string> StartedIds(const SchedulePlan& plan) {
  std::vector<std::string> ids;
  for (const auto& s : plan.starts) ids.push_back(s.job_id);
  return ids;
}

Scheduler MakeScheduler(absl::Duration window = absl::Minutes(2)) {
  return Scheduler(Scheduler::Options{window});
}

TEST(Scheduler, HigherPriorityStartsFirst) {
  auto plan = MakeScheduler().Plan({Job("1", 1, 0), Job("2", 1, 5)}, CpuDevices(1),
                                   {{v1::DEVICE_TYPE_CPU, 1}}, kNow);
  EXPECT_EQ(StartedIds(plan), std::vector<std::string>{"2"});
  EXPECT_EQ(plan.waiting.count("1"), 1u);
}

TEST(Scheduler, EqualPrioritiesStartInSubmissionOrder) {
  auto plan = MakeScheduler().Plan({Job("3", 1), Job("1", 1), Job("2", 1)}, CpuDevices(2),
                                   {{v1::DEVICE_TYPE_CPU, 2}}, kNow);
  EXPECT_EQ(StartedIds(plan), (std::vector<std::string>{"1", "2"}));
}

TEST(Scheduler, GangStartsOnlyWithAllItsDevices) {
  auto plan = MakeScheduler().Plan({Job("1", 2)}, CpuDevices(1), {{v1::DEVICE_TYPE_CPU, 2}}, kNow);
  EXPECT_TRUE(plan.starts.empty());
  EXPECT_EQ(plan.waiting.at("1"), "waiting for 2 CPU devices (1 free)");

  plan = MakeScheduler().Plan({Job("1", 2)}, CpuDevices(2), {{v1::DEVICE_TYPE_CPU, 2}}, kNow);
  ASSERT_EQ(plan.starts.size(), 1u);
  EXPECT_EQ(plan.starts[0].worker_ids.size(), 2u);
}

TEST(Scheduler, SmallerJobsBackfillWhileTheBlockedJobIsYoung) {
  auto plan = MakeScheduler().Plan({Job("1", 2, 0, absl::Seconds(10)), Job("2", 1)}, CpuDevices(1),
                                   {{v1::DEVICE_TYPE_CPU, 2}}, kNow);
  EXPECT_EQ(StartedIds(plan), std::vector<std::string>{"2"});
}

TEST(Scheduler, NoBackfillPastTheWindowSoTheLargeJobIsNotStarved) {
  auto plan = MakeScheduler(absl::Minutes(2))
                  .Plan({Job("1", 2, 0, absl::Minutes(3)), Job("2", 1)}, CpuDevices(1),
                        {{v1::DEVICE_TYPE_CPU, 2}}, kNow);
  EXPECT_TRUE(plan.starts.empty());
  EXPECT_EQ(plan.waiting.at("2"), "queued behind job 1");
}

// Two devices, both busy with small jobs that end a minute apart; a new small job
// arrives every minute and runs three. Returns whether the 2-device job ever starts.
bool LargeJobStarts(const Scheduler& scheduler) {
  const DeviceCapacity capacity{{v1::DEVICE_TYPE_CPU, 2}};
  absl::Time now = kNow;
  std::vector<QueuedJob> queue = {Job("1", 2)};
  std::map<std::string, absl::Time> running = {{"a", now + absl::Minutes(1)},
                                               {"b", now + absl::Minutes(2)}};
  int next_id = 2;
  for (int minute = 1; minute <= 60; ++minute) {
    now = kNow + absl::Minutes(minute);
    for (auto it = running.begin(); it != running.end();) {
      it = it->second <= now ? running.erase(it) : std::next(it);
    }
    QueuedJob small = Job(std::to_string(next_id++), 1);
    small.queued_since = now;
    queue.push_back(small);
    auto plan =
        scheduler.Plan(queue, CpuDevices(2 - static_cast<int>(running.size())), capacity, now);
    for (const auto& start : plan.starts) {
      if (start.job_id == "1") return true;
      running[start.job_id] = now + absl::Minutes(3);
      queue.erase(std::remove_if(queue.begin(), queue.end(),
                                 [&](const QueuedJob& q) { return q.id == start.job_id; }),
                  queue.end());
    }
  }
  return false;
}

TEST(Scheduler, AStreamOfSmallJobsCannotStarveALargeOne) {
  EXPECT_TRUE(LargeJobStarts(MakeScheduler(absl::Minutes(2))));
  // The same stream starves it when backfilling never stops: the window is what saves it.
  EXPECT_FALSE(LargeJobStarts(MakeScheduler(absl::InfiniteDuration())));
}

TEST(Scheduler, JobLargerThanTheClusterWaitsWithoutBlockingOthers) {
  auto plan = MakeScheduler().Plan({Job("1", 8, 0, absl::Hours(1)), Job("2", 1)}, CpuDevices(2),
                                   {{v1::DEVICE_TYPE_CPU, 2}}, kNow);
  EXPECT_EQ(StartedIds(plan), std::vector<std::string>{"2"});
  EXPECT_EQ(plan.waiting.at("1"), "needs 8 CPU devices; the cluster has 2");
}

TEST(Scheduler, PrefersOneHostAndTheTightestFit) {
  std::vector<FreeDevice> free = CpuDevices(3, "big");
  for (const auto& d : CpuDevices(2, "small")) free.push_back(d);
  auto plan = MakeScheduler().Plan({Job("1", 2)}, free, {{v1::DEVICE_TYPE_CPU, 5}}, kNow);
  ASSERT_EQ(plan.starts.size(), 1u);
  EXPECT_EQ(plan.starts[0].worker_ids, (std::vector<std::string>{"small/cpu:0", "small/cpu:1"}));
}

TEST(Scheduler, SpansHostsWhenNoHostIsLargeEnough) {
  std::vector<FreeDevice> free = CpuDevices(2, "a");
  for (const auto& d : CpuDevices(2, "b")) free.push_back(d);
  auto plan = MakeScheduler().Plan({Job("1", 3)}, free, {{v1::DEVICE_TYPE_CPU, 4}}, kNow);
  ASSERT_EQ(plan.starts.size(), 1u);
  const auto& workers = plan.starts[0].worker_ids;
  ASSERT_EQ(workers.size(), 3u);
  // Ranks on one host are contiguous.
  EXPECT_EQ(workers[0].substr(0, 1), workers[1].substr(0, 1));
}

TEST(Scheduler, FourPairsOnAnEightGpuHostStartTogetherOnDisjointNeighbouringPairs) {
  std::vector<FreeDevice> free;
  for (uint32_t i = 0; i < 8; ++i) {
    free.push_back({"h1/cuda:" + std::to_string(i), "h1", v1::DEVICE_TYPE_CUDA, i});
  }
  auto plan = MakeScheduler().Plan({Job("1", 2), Job("2", 2), Job("3", 2), Job("4", 2)}, free,
                                   {{v1::DEVICE_TYPE_CUDA, 8}}, kNow);
  ASSERT_EQ(plan.starts.size(), 4u);
  std::map<std::string, std::string> holder;
  for (const auto& start : plan.starts) {
    ASSERT_EQ(start.worker_ids.size(), 2u) << start.job_id;
    for (const auto& worker : start.worker_ids) {
      EXPECT_TRUE(holder.emplace(worker, start.job_id).second)
          << worker << " given to jobs " << holder[worker] << " and " << start.job_id;
    }
    // A pair of neighbours (0-1, 2-3, ...): on hosts without a switch between all GPUs
    // those are the ones that share a link.
    const int first = std::stoi(start.worker_ids[0].substr(start.worker_ids[0].find(':') + 1));
    const int second = std::stoi(start.worker_ids[1].substr(start.worker_ids[1].find(':') + 1));
    EXPECT_EQ(std::min(first, second) % 2, 0) << start.job_id;
    EXPECT_EQ(std::abs(first - second), 1) << start.job_id;
  }
}

TEST(Scheduler, AnyDeviceMeansGpusWhenTheClusterHasThem) {
  std::vector<FreeDevice> free = CpuDevices(2);
  free.push_back({"h1/cuda:0", "h1", v1::DEVICE_TYPE_CUDA, 0});
  auto plan = MakeScheduler().Plan({Job("1", 1)}, free,
                                   {{v1::DEVICE_TYPE_CPU, 2}, {v1::DEVICE_TYPE_CUDA, 1}}, kNow);
  ASSERT_EQ(plan.starts.size(), 1u);
  EXPECT_EQ(plan.starts[0].worker_ids[0], "h1/cuda:0");
}

// A job its group's guarantee covers goes first; among equal priorities: one past the
// starvation age (oldest first), then the owner with the least recent use, then
// submission order, which keeps one owner's jobs in the order they came.
TEST(Scheduler, EqualPrioritiesGoByGuaranteeThenAgeThenFairShareThenSubmission) {
  auto job = [](const std::string& id, const std::string& owner, double use,
                absl::Duration waited = absl::Minutes(1), bool guaranteed = false) {
    QueuedJob j = Job(id, 1, 0, waited);
    j.owner = owner;
    j.owner_use = use;
    j.within_guarantee = guaranteed;
    return j;
  };
  std::vector<QueuedJob> queue = {job("1", "heavy", 9000),
                                  job("2", "heavy", 9000),
                                  job("3", "light", 10),
                                  job("4", "light", 10),
                                  job("5", "fresh", 0),
                                  job("6", "heavy", 9000, absl::Hours(2)),
                                  job("7", "heavy", 9000, absl::Hours(3)),
                                  job("8", "group", 9999, absl::Minutes(1), true)};
  queue.push_back(Job("9", 1, /*priority=*/1));
  MakeScheduler().Order(queue, kNow);
  std::vector<std::string> order;
  order.reserve(queue.size());
  for (const auto& q : queue) order.push_back(q.id);
  EXPECT_EQ(order, (std::vector<std::string>{"8", "9", "7", "6", "5", "3", "4", "1", "2"}));
}

// Fair share cannot starve a busy owner: once its job has waited past the starvation
// age, it goes ahead of the light owners' newer jobs.
TEST(Scheduler, ABusyOwnersJobIsNotPassedOverForeverByLighterOwners) {
  QueuedJob busy = Job("1", 1, 0, absl::Minutes(59));
  busy.owner = "busy";
  busy.owner_use = 1e6;
  QueuedJob light = Job("2", 1, 0, absl::Minutes(1));
  light.owner = "light";
  auto plan = MakeScheduler().Plan({busy, light}, CpuDevices(1), {{v1::DEVICE_TYPE_CPU, 1}}, kNow);
  ASSERT_EQ(StartedIds(plan), std::vector<std::string>{"2"});
  busy.queued_since = kNow - absl::Minutes(61);
  plan = MakeScheduler().Plan({busy, light}, CpuDevices(1), {{v1::DEVICE_TYPE_CPU, 1}}, kNow);
  EXPECT_EQ(StartedIds(plan), std::vector<std::string>{"1"});
}

}  // namespace
}  // namespace stoke::server
