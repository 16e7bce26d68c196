// End to end on loopback with real processes: a stoke-coordinator with two local CPU
// workers, its SQLite store in a temp dir, and the C++ client. Covers what a user relies
// on: jobs train and stream their progress, watches resume, gangs wait for all their
// devices, cancel frees devices, and killed processes lose no job.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <future>
#include <map>

#include "tests/support/coordinator_process.h"
#include "tests/support/temp_dir.h"
#include "tests/support/wait.h"

namespace stoke::testing {
namespace {

using std::chrono::seconds;

v1::JobSpec TinyJob(uint64_t steps, uint32_t interval = 10, uint32_t devices = 1) {
  v1::JobSpec spec;
  spec.set_name("tiny");
  spec.mutable_model()->mutable_mlp()->add_hidden(32);
  spec.mutable_data()->mutable_synthetic()->set_features(16);
  spec.mutable_training()->set_steps(steps);
  spec.mutable_training()->set_batch_size(32);
  spec.mutable_metrics()->set_interval_steps(interval);
  spec.mutable_resources()->set_gpus(devices);
  return spec;
}

// Effectively endless: runs until cancelled or killed.
v1::JobSpec EndlessJob(uint32_t devices = 1) { return TinyJob(1'000'000'000, 50, devices); }

class ClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    coordinator_ = CoordinatorProcess::Start({dir_.path()});
    ASSERT_NE(coordinator_, nullptr);
  }

  client::Client& client() { return coordinator_->client(); }

  std::string Submit(const v1::JobSpec& spec) {
    auto job = client().SubmitJob(spec);
    EXPECT_TRUE(job.ok()) << job.status();
    return job.ok() ? job->id() : "";
  }

  v1::JobState StateOf(const std::string& id) {
    auto job = client().GetJob(id);
    return job.ok() ? job->state() : v1::JOB_STATE_UNSPECIFIED;
  }

  bool WaitForState(const std::string& id, v1::JobState state, seconds timeout = seconds(60)) {
    bool reached = WaitFor([&] { return StateOf(id) == state; }, timeout);
    if (!reached) {
      ADD_FAILURE() << "job " << id << " never reached " << v1::JobState_Name(state) << "; it is "
                    << v1::JobState_Name(StateOf(id)) << "; coordinator log:\n"
                    << coordinator_->Log();
    }
    return reached;
  }

  std::vector<v1::JobEvent> AllEvents(const std::string& id, uint64_t from_seq = 1) {
    std::vector<v1::JobEvent> events;
    client::WatchOptions options;
    options.from_seq = from_seq;
    auto status = client().WatchJob(id, options, [&](const v1::JobEvent& e) {
      events.push_back(e);
      return true;
    });
    EXPECT_TRUE(status.ok()) << status;
    return events;
  }

  // The events of a job that may still be running, up to the newest one now.
  std::vector<v1::JobEvent> EventsSoFar(const std::string& id) {
    std::vector<v1::JobEvent> events;
    auto job = client().GetJob(id);
    if (!job.ok()) return events;
    const uint64_t last = job->last_event_seq();
    auto status = client().WatchJob(id, {}, [&](const v1::JobEvent& e) {
      events.push_back(e);
      return e.seq() < last;
    });
    EXPECT_TRUE(status.ok()) << status;
    return events;
  }

  std::map<std::string, v1::Worker> Workers() {
    std::map<std::string, v1::Worker> workers;
    auto cluster = client().GetCluster();
    if (cluster.ok()) {
      for (const auto& w : cluster->workers()) workers[w.id()] = w;
    }
    return workers;
  }

  bool AllWorkersIdle() {
    auto workers = Workers();
    if (workers.size() != 2) return false;
    for (const auto& [id, w] : workers) {
      if (w.state() != v1::WORKER_STATE_IDLE) return false;
    }
    return true;
  }

  TempDir dir_;
  std::unique_ptr<CoordinatorProcess> coordinator_;
};

TEST_F(ClusterTest, JobTrainsAndStreamsItsProgressInOrder) {
  std::string id = Submit(TinyJob(200, 10));
  std::vector<v1::JobEvent> events = AllEvents(id);  // returns once the job has finished
  ASSERT_FALSE(events.empty());
  std::vector<v1::JobState> states;
  std::vector<uint64_t> steps;
  std::vector<double> losses;
  int evaluations = 0;
  for (size_t i = 0; i < events.size(); ++i) {
    EXPECT_EQ(events[i].seq(), i + 1) << "events must be numbered without gaps";
    if (events[i].has_state_change()) states.push_back(events[i].state_change().state());
    if (events[i].has_metrics() && events[i].metrics().has_eval()) {
      ++evaluations;
      EXPECT_EQ(events[i].metrics().step(), 200u);
    } else if (events[i].has_metrics()) {
      steps.push_back(events[i].metrics().step());
      losses.push_back(events[i].metrics().loss());
      EXPECT_GT(events[i].metrics().samples_per_second(), 0);
    }
  }
  EXPECT_EQ(states, (std::vector<v1::JobState>{v1::JOB_STATE_PENDING, v1::JOB_STATE_SCHEDULED,
                                               v1::JOB_STATE_RUNNING, v1::JOB_STATE_SUCCEEDED}));
  ASSERT_EQ(steps.size(), 20u);
  EXPECT_EQ(evaluations, 1) << "one evaluation, at the end";
  for (size_t i = 0; i < steps.size(); ++i) EXPECT_EQ(steps[i], 10 * (i + 1));
  EXPECT_LT(losses.back(), losses.front()) << "the model should learn";
  auto job = client().GetJob(id);
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(job->latest_metrics().step(), 200u);
  EXPECT_EQ(job->last_event_seq(), events.size());
}

TEST_F(ClusterTest, WatchResumesFromASequenceNumber) {
  std::string id = Submit(TinyJob(300, 10));
  // Watch part of the way, drop the stream, then pick up where it stopped.
  std::vector<v1::JobEvent> seen;
  auto status = client().WatchJob(id, {}, [&](const v1::JobEvent& e) {
    seen.push_back(e);
    return seen.size() < 6;
  });
  ASSERT_TRUE(status.ok()) << status;
  ASSERT_EQ(seen.size(), 6u);
  for (const auto& e : AllEvents(id, seen.back().seq() + 1)) seen.push_back(e);
  std::vector<v1::JobEvent> full = AllEvents(id);
  ASSERT_EQ(seen.size(), full.size());
  for (size_t i = 0; i < full.size(); ++i) {
    EXPECT_EQ(seen[i].SerializeAsString(), full[i].SerializeAsString()) << "event " << i + 1;
  }
  // From the middle of a finished job: exactly the tail.
  std::vector<v1::JobEvent> tail = AllEvents(id, 10);
  ASSERT_EQ(tail.size(), full.size() - 9);
  EXPECT_EQ(tail.front().seq(), 10u);
}

TEST_F(ClusterTest, WatchingAFinishedJobDeliversABacklogLongerThanOneRead) {
  // More events than the coordinator reads from its store at once (256): once the job has
  // ended no new event wakes the watch, so it has to go on reading by itself.
  std::string id = Submit(TinyJob(600, 1));
  ASSERT_TRUE(WaitForState(id, v1::JOB_STATE_SUCCEEDED, seconds(120)));
  auto job = client().GetJob(id);
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_GT(job->last_event_seq(), 600u);
  auto all = std::async(std::launch::async, [&] { return AllEvents(id); });
  if (all.wait_for(seconds(30)) != std::future_status::ready) {
    ADD_FAILURE() << "the watch of a finished job stalled before its last event";
    coordinator_->Kill();  // ends the stream, so the test can end
  }
  const std::vector<v1::JobEvent> events = all.get();
  ASSERT_EQ(events.size(), job->last_event_seq());
  EXPECT_EQ(events.back().seq(), job->last_event_seq());
  // And from the middle of the backlog, across a batch boundary.
  EXPECT_EQ(AllEvents(id, 200).size(), job->last_event_seq() - 199);
}

TEST_F(ClusterTest, TwoDeviceJobWaitsWhileAOneDeviceJobHoldsADevice) {
  std::string small = Submit(EndlessJob(1));
  ASSERT_TRUE(WaitForState(small, v1::JOB_STATE_RUNNING));
  std::string gang = Submit(EndlessJob(2));
  // However long we look, it does not start on the one free device.
  for (int i = 0; i < 20; ++i) {
    auto job = client().GetJob(gang);
    ASSERT_TRUE(job.ok());
    ASSERT_EQ(job->state(), v1::JOB_STATE_PENDING);
    EXPECT_EQ(job->placement_size(), 0);
    EXPECT_NE(job->message().find("waiting for 2 CPU devices (1 free)"), std::string::npos)
        << job->message();
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_TRUE(client().CancelJob(small).ok());
  ASSERT_TRUE(WaitFor([&] { return client().GetJob(gang)->placement_size() == 2; }, seconds(20)))
      << "the gang did not get both devices; coordinator log:\n"
      << coordinator_->Log();
  auto job = client().GetJob(gang);
  EXPECT_NE(job->placement(0).worker_id(), job->placement(1).worker_id());
  client().CancelJob(gang).IgnoreError();
}

TEST_F(ClusterTest, CancelStopsARunningJobAndFreesItsDevicesWithinSeconds) {
  std::string id = Submit(EndlessJob());
  ASSERT_TRUE(WaitForState(id, v1::JOB_STATE_RUNNING));
  const auto started = std::chrono::steady_clock::now();
  auto cancelled = client().CancelJob(id, "test");
  ASSERT_TRUE(cancelled.ok()) << cancelled.status();
  EXPECT_EQ(cancelled->state(), v1::JOB_STATE_CANCELLED);
  ASSERT_TRUE(WaitFor([&] { return AllWorkersIdle(); }, seconds(5)))
      << "devices still held 5 s after cancel";
  EXPECT_LT(std::chrono::steady_clock::now() - started, seconds(5));
  // The freed devices take new work.
  std::string next = Submit(TinyJob(20));
  EXPECT_TRUE(WaitForState(next, v1::JOB_STATE_SUCCEEDED));
}

TEST_F(ClusterTest, KilledCoordinatorRestartsWithEveryJobAndItsWorkersTrainOn) {
  std::string done = Submit(TinyJob(30));
  ASSERT_TRUE(WaitForState(done, v1::JOB_STATE_SUCCEEDED));
  std::vector<v1::JobEvent> done_events = AllEvents(done);
  std::string running = Submit(EndlessJob());
  ASSERT_TRUE(WaitForState(running, v1::JOB_STATE_RUNNING));
  std::string queued = Submit(EndlessJob(/*devices=*/4));  // more than the cluster has
  ASSERT_EQ(StateOf(queued), v1::JOB_STATE_PENDING);
  std::vector<pid_t> worker_pids;
  for (const auto& [id, w] : Workers()) worker_pids.push_back(static_cast<pid_t>(w.pid()));

  coordinator_->Kill();
  // Its workers train on without it, and reattach to the next one.
  for (pid_t pid : worker_pids) EXPECT_TRUE(ProcessAlive(pid)) << "worker " << pid;
  coordinator_ = CoordinatorProcess::Start({dir_.path()});
  ASSERT_NE(coordinator_, nullptr);
  std::vector<pid_t> reattached;
  for (const auto& [id, w] : Workers()) reattached.push_back(static_cast<pid_t>(w.pid()));
  std::sort(worker_pids.begin(), worker_pids.end());
  std::sort(reattached.begin(), reattached.end());
  EXPECT_EQ(reattached, worker_pids) << "the same processes, none started twice";

  auto finished = client().GetJob(done);
  ASSERT_TRUE(finished.ok());
  EXPECT_EQ(finished->state(), v1::JOB_STATE_SUCCEEDED);
  std::vector<v1::JobEvent> after = AllEvents(done);
  ASSERT_EQ(after.size(), done_events.size());
  for (size_t i = 0; i < after.size(); ++i) {
    EXPECT_EQ(after[i].SerializeAsString(), done_events[i].SerializeAsString());
  }
  // The running job was taken back where it was: the same attempt, no restart.
  ASSERT_TRUE(WaitForState(running, v1::JOB_STATE_RUNNING));
  auto carried = client().GetJob(running);
  EXPECT_EQ(carried->restarts(), 0u);
  EXPECT_EQ(carried->attempt(), 1u);
  EXPECT_EQ(StateOf(queued), v1::JOB_STATE_PENDING);
  // Ids continue where they were.
  auto next = client().SubmitJob(TinyJob(10));
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(next->id(), "4");
  client().CancelJob(running).IgnoreError();
  client().CancelJob(queued).IgnoreError();
}

TEST_F(ClusterTest, KilledWorkerPutsItsJobBackInTheQueue) {
  std::string id = Submit(EndlessJob());
  ASSERT_TRUE(WaitForState(id, v1::JOB_STATE_RUNNING));
  auto job = client().GetJob(id);
  const std::string worker_id = job->placement(0).worker_id();
  const pid_t pid = static_cast<pid_t>(Workers().at(worker_id).pid());
  ASSERT_GT(pid, 0);
  ASSERT_EQ(kill(pid, SIGKILL), 0);

  // Back in the queue with one restart counted, then running again.
  ASSERT_TRUE(WaitFor([&] { return client().GetJob(id)->restarts() == 1; }, seconds(20)))
      << coordinator_->Log();
  ASSERT_TRUE(WaitFor(
      [&] {
        auto j = client().GetJob(id);
        return j->state() == v1::JOB_STATE_RUNNING && j->attempt() == 2;
      },
      seconds(60)))
      << coordinator_->Log();
  bool saw_restarting = false;
  for (const auto& e : EventsSoFar(id)) {
    if (e.has_state_change() && e.state_change().state() == v1::JOB_STATE_RESTARTING) {
      saw_restarting = true;
      EXPECT_NE(e.state_change().message().find(worker_id), std::string::npos)
          << e.state_change().message();
    }
  }
  EXPECT_TRUE(saw_restarting);
  // The supervisor started a new process for the killed worker.
  ASSERT_TRUE(WaitFor(
      [&] {
        auto workers = Workers();
        return workers.count(worker_id) &&
               workers.at(worker_id).pid() != static_cast<uint32_t>(pid);
      },
      seconds(30)));
  client().CancelJob(id).IgnoreError();
}

// A spec that asks for a checkpoint at every step gets one at most every
// --min-checkpoint-seconds (and always its last), so no job can write its folder in a loop.
TEST(CheckpointPace, TheCoordinatorsMinimumIntervalHoldsWhateverTheSpecAsks) {
  TempDir dir;
  CoordinatorProcess::Options options{dir.path()};
  options.local_workers = "cpu:1";
  options.min_checkpoint_seconds = 3600;
  auto coordinator = CoordinatorProcess::Start(options);
  ASSERT_NE(coordinator, nullptr);
  v1::JobSpec spec = TinyJob(300);
  spec.mutable_checkpoint()->set_interval_steps(1);
  spec.mutable_checkpoint()->set_keep(100);
  auto job = coordinator->client().SubmitJob(spec);
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE(WaitFor(
      [&] {
        auto now = coordinator->client().GetJob(job->id());
        return now.ok() && now->state() == v1::JOB_STATE_SUCCEEDED;
      },
      seconds(120)))
      << coordinator->Log();
  auto checkpoints = coordinator->client().ListCheckpoints(job->id());
  ASSERT_TRUE(checkpoints.ok()) << checkpoints.status();
  ASSERT_EQ(checkpoints->checkpoints_size(), 1);
  EXPECT_EQ(checkpoints->checkpoints(0).step(), 300u);
}

}  // namespace
}  // namespace stoke::testing
