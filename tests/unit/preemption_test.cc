// The preemption policy as a table of scenarios: who is stopped for whom, on a cluster
// described by its free devices, its running jobs and its queue.
#include "server/core/preemption.h"

#include "spec/preemptible.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace stoke::server {
namespace {

const absl::Time kNow = absl::FromUnixSeconds(1'000'000);

QueuedJob Waiting(const std::string& id, uint32_t devices, int priority) {
  QueuedJob job;
  job.id = id;
  job.order = std::stoull(id);
  job.devices = devices;
  job.priority = priority;
  job.kind = v1::DEVICE_KIND_CUDA;
  return job;
}

// Running on GPUs since `minutes_ago`.
RunningJob Running(const std::string& id, uint32_t devices, int priority, int minutes_ago,
                   bool preemptible = true, bool stopping = false) {
  RunningJob job;
  job.id = id;
  job.priority = priority;
  job.preemptible = preemptible;
  job.devices = devices;
  job.type = v1::DEVICE_TYPE_CUDA;
  job.since = kNow - absl::Minutes(minutes_ago);
  job.stopping = stopping;
  return job;
}

RunningJob CpuJob(const std::string& id, int priority) {
  RunningJob job = Running(id, 1, priority, 0);
  job.type = v1::DEVICE_TYPE_CPU;
  return job;
}

QueuedJob Guaranteed(QueuedJob job) {
  job.within_guarantee = true;
  return job;
}

RunningJob Borrowing(RunningJob job) {
  job.borrowing = true;
  return job;
}

QueuedJob InGroup(QueuedJob job, const std::string& group) {
  job.group = group;
  return job;
}

RunningJob InGroup(RunningJob job, const std::string& group, bool guaranteed) {
  job.group = group;
  job.guaranteed = guaranteed;
  return job;
}

RunningJob Protected(RunningJob job) {
  job.protected_job = true;
  return job;
}

struct Scenario {
  std::string name;
  std::vector<QueuedJob> waiting;  // in the scheduler's order
  std::vector<RunningJob> running;
  uint32_t free_gpus = 0;
  uint32_t gpus = 8;
  // "victim>for_job", in the order planned.
  std::vector<std::string> expected;
};

std::vector<std::string> Plan(const Scenario& s) {
  DeviceCapacity free{{v1::DEVICE_TYPE_CUDA, s.free_gpus}};
  DeviceCapacity capacity{{v1::DEVICE_TYPE_CUDA, s.gpus}};
  std::vector<std::string> out;
  for (const auto& p : PlanPreemptions(s.waiting, s.running, free, capacity)) {
    out.push_back(p.victim + ">" + p.for_job);
  }
  return out;
}

TEST(Preemption, ScenariosPlanTheVictimsThatLoseLeast) {
  const std::vector<Scenario> scenarios = {
      {"priority inversion: an urgent job stops the low-priority one holding the GPUs",
       {Waiting("10", 8, 5)},
       {Running("1", 8, -1, 60)},
       0,
       8,
       {"1>10"}},
      {"equal priority preempts nobody", {Waiting("10", 1, 0)}, {Running("1", 1, 0, 60)}, 0, 1, {}},
      {"a protected job is never a victim",
       {Waiting("10", 1, 5)},
       {Running("1", 1, -1, 60, /*preemptible=*/false)},
       0,
       1,
       {}},
      {"only what is missing is freed: one free GPU and one victim for a gang of two",
       {Waiting("10", 2, 5)},
       {Running("1", 1, -1, 60), Running("2", 1, -1, 30), Running("3", 1, 3, 30)},
       1,
       4,
       {"2>10"}},
      {"lowest priority goes first, then the attempt started last",
       {Waiting("10", 2, 5)},
       {Running("1", 1, -5, 10), Running("2", 1, -1, 120), Running("3", 1, -1, 5),
        Running("4", 1, -5, 30)},
       0,
       4,
       {"1>10", "4>10"}},
      {"a small victim a later large one made needless is spared",
       {Waiting("10", 4, 5)},
       {Running("1", 1, -3, 5), Running("2", 4, -2, 5)},
       0,
       5,
       {"2>10"}},
      {"not enough below it: nothing is stopped in vain",
       {Waiting("10", 4, 5)},
       {Running("1", 2, -1, 5), Running("2", 2, 7, 5)},
       0,
       4,
       {}},
      {"devices already coming free count: no second victim for the same job",
       {Waiting("10", 2, 5)},
       {Running("1", 2, -1, 5, true, /*stopping=*/true), Running("2", 2, -1, 5)},
       0,
       4,
       {}},
      {"two waiting jobs do not count on the same devices",
       {Waiting("10", 2, 5), Waiting("11", 2, 4)},
       {Running("1", 2, -1, 5, true, /*stopping=*/true), Running("2", 2, -1, 5)},
       0,
       4,
       {"2>11"}},
      {"gang under preemption: a four-GPU gang is stopped whole for a two-GPU job",
       {Waiting("10", 2, 1)},
       {Running("1", 4, 0, 5)},
       0,
       4,
       {"1>10"}},
      {"a job larger than the cluster preempts nothing",
       {Waiting("10", 16, 9)},
       {Running("1", 8, -1, 5)},
       0,
       8,
       {}},
      {"CPU jobs are not stopped for a GPU job",
       {Waiting("10", 1, 9)},
       {CpuJob("1", -1)},
       0,
       1,
       {}},
      {"a group reclaims its guarantee from a borrower, whatever the borrower's priority",
       {Guaranteed(Waiting("10", 1, 0))},
       {Borrowing(Running("1", 1, 5, 5, /*preemptible=*/false))},
       0,
       1,
       {"1>10"}},
      {"a borrower an admin protected keeps its devices",
       {Guaranteed(Waiting("10", 1, 0))},
       {Protected(Borrowing(Running("1", 1, 5, 5, false)))},
       0,
       1,
       {}},
      {"a job beyond its group's guarantee reclaims nothing",
       {Waiting("10", 1, 0)},
       {Borrowing(Running("1", 1, 5, 5, false))},
       0,
       1,
       {}},
      {"a job within its group's guarantee is safe from other groups' priorities",
       {InGroup(Waiting("10", 1, 9), "b")},
       {InGroup(Running("1", 1, -5, 5), "a", /*guaranteed=*/true)},
       0,
       1,
       {}},
      {"but not from its own group's",
       {InGroup(Waiting("10", 1, 9), "a")},
       {InGroup(Running("1", 1, -5, 5), "a", /*guaranteed=*/true)},
       0,
       1,
       {"1>10"}},
      {"reclaim takes borrowers only: a guaranteed job is not a victim",
       {Guaranteed(Waiting("10", 2, 0))},
       {Running("1", 1, 5, 50, false), Borrowing(Running("2", 1, 5, 5, false))},
       0,
       2,
       {}},
  };
  for (const Scenario& s : scenarios) {
    EXPECT_EQ(Plan(s), s.expected) << s.name;
  }
}

TEST(Preemption, JobsBelowPriorityZeroArePreemptibleUnlessTheirSpecSaysOtherwise) {
  v1::ResourceSpec resources;
  resources.set_priority(-1);
  EXPECT_TRUE(spec::IsPreemptible(resources));
  resources.set_preemptible(false);
  EXPECT_FALSE(spec::IsPreemptible(resources));
  resources.set_priority(0);
  resources.clear_preemptible();
  EXPECT_FALSE(spec::IsPreemptible(resources));
  resources.set_preemptible(true);
  EXPECT_TRUE(spec::IsPreemptible(resources));
}

}  // namespace
}  // namespace stoke::server
