// A worker started on its own (as on another host) attaches to a coordinator by address,
// runs jobs, survives a coordinator crash by reconnecting, and when it is shut down its
// job stops at a step boundary and goes back to the queue.
#include <gtest/gtest.h>
#include <signal.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>

#include "tests/support/coordinator_process.h"
#include "tests/support/temp_dir.h"
#include "tests/support/wait.h"

namespace stoke::testing {
namespace {

using std::chrono::seconds;

v1::JobSpec Job(uint64_t steps) {
  v1::JobSpec spec;
  spec.mutable_model()->mutable_mlp()->add_hidden(16);
  spec.mutable_data()->mutable_synthetic()->set_features(8);
  spec.mutable_training()->set_steps(steps);
  spec.mutable_training()->set_batch_size(16);
  spec.mutable_metrics()->set_interval_steps(20);
  return spec;
}

// A coordinator on a port of its own, with no local workers: only the test's attach.
CoordinatorProcess::Options WithoutLocalWorkers(const TempDir& dir) {
  CoordinatorProcess::Options options;
  options.data_dir = dir.path();
  options.address = "127.0.0.1:" + std::to_string(FreePort());
  options.local_workers = "0";
  return options;
}

bool HasWorker(client::Client& client, const std::string& id) {
  auto cluster = client.GetCluster();
  if (!cluster.ok()) return false;
  for (const auto& w : cluster->workers()) {
    if (w.id() == id) return !w.local();
  }
  return false;
}

TEST(RemoteWorker, AttachesRunsJobsAndOutlivesACoordinatorCrash) {
  TempDir dir;
  const CoordinatorProcess::Options options = WithoutLocalWorkers(dir);
  auto coordinator = CoordinatorProcess::Start(options);
  ASSERT_NE(coordinator, nullptr);
  WorkerProcess worker(options.address, "remote-a", dir.File("worker.log"));
  ASSERT_TRUE(WaitFor([&] { return HasWorker(coordinator->client(), "remote-a"); }, seconds(30)));

  auto quick = coordinator->client().SubmitJob(Job(40));
  ASSERT_TRUE(quick.ok());
  ASSERT_TRUE(WaitFor(
      [&] { return coordinator->client().GetJob(quick->id())->state() == v1::JOB_STATE_SUCCEEDED; },
      seconds(60)));
  EXPECT_EQ(coordinator->client().GetJob(quick->id())->placement(0).worker_id(), "remote-a");

  auto endless = coordinator->client().SubmitJob(Job(1'000'000'000));
  ASSERT_TRUE(endless.ok());
  auto running = [&](uint32_t attempt) {
    auto job = coordinator->client().GetJob(endless->id());
    return job.ok() && job->state() == v1::JOB_STATE_RUNNING && job->attempt() == attempt;
  };
  ASSERT_TRUE(WaitFor([&] { return running(1); }, seconds(30)));

  coordinator->Kill();
  std::this_thread::sleep_for(std::chrono::seconds(1));
  EXPECT_TRUE(ProcessAlive(worker.pid())) << "a remote worker outlives its coordinator";
  coordinator = CoordinatorProcess::Start(options);
  ASSERT_NE(coordinator, nullptr);
  // The worker reconnects by itself, still training the job: it carries on, in its first
  // attempt.
  ASSERT_TRUE(WaitFor([&] { return HasWorker(coordinator->client(), "remote-a"); }, seconds(30)));
  const uint64_t step = coordinator->client().GetJob(endless->id())->latest_metrics().step();
  ASSERT_TRUE(WaitFor(
      [&] { return coordinator->client().GetJob(endless->id())->latest_metrics().step() > step; },
      seconds(30)))
      << coordinator->Log();
  EXPECT_TRUE(running(1));

  // A worker shut down cleanly says so first and lets its task stop at a step boundary: the
  // job goes back to the queue as PREEMPTED, with a checkpoint of the very step it stopped
  // after (no step lost), without spending one of its restarts; the worker gets no new work.
  worker.Kill(SIGTERM);
  ASSERT_TRUE(WaitFor([&] { return !HasWorker(coordinator->client(), "remote-a"); }, seconds(15)));
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  auto job = coordinator->client().GetJob(endless->id());
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(job->state(), v1::JOB_STATE_PREEMPTED) << job->message();
  EXPECT_EQ(job->restarts(), 0u);
  EXPECT_EQ(job->attempt(), 1u) << "no attempt may start on a worker that is leaving";
  EXPECT_NE(job->message().find("because worker remote-a shut down"), std::string::npos)
      << job->message();
  const std::string after = "preempted after step ";
  const size_t at = job->message().find(after);
  ASSERT_NE(at, std::string::npos) << job->message();
  const uint64_t stopped_after =
      std::strtoull(job->message().c_str() + at + after.size(), nullptr, 10);
  EXPECT_GT(stopped_after, step);
  auto checkpoints = coordinator->client().ListCheckpoints(endless->id());
  ASSERT_TRUE(checkpoints.ok()) << checkpoints.status();
  ASSERT_GT(checkpoints->checkpoints_size(), 0);
  EXPECT_EQ(checkpoints->checkpoints(checkpoints->checkpoints_size() - 1).step(), stopped_after);
}

// With --stop-grace 0, a worker shut down cancels its task at once: the job goes back to the
// queue as it was, to resume from its newest checkpoint.
TEST(RemoteWorker, WithNoStopGraceAShutDownWorkersJobIsQueuedAtOnce) {
  TempDir dir;
  const CoordinatorProcess::Options options = WithoutLocalWorkers(dir);
  auto coordinator = CoordinatorProcess::Start(options);
  ASSERT_NE(coordinator, nullptr);
  WorkerProcess worker(options.address, "remote-b", dir.File("worker.log"), -1,
                       {"--stop-grace", "0"});
  ASSERT_TRUE(WaitFor([&] { return HasWorker(coordinator->client(), "remote-b"); }, seconds(30)));
  auto endless = coordinator->client().SubmitJob(Job(1'000'000'000));
  ASSERT_TRUE(endless.ok());
  ASSERT_TRUE(WaitFor(
      [&] { return coordinator->client().GetJob(endless->id())->latest_metrics().step() > 0; },
      seconds(30)));
  worker.Kill(SIGTERM);
  ASSERT_TRUE(WaitFor([&] { return !HasWorker(coordinator->client(), "remote-b"); }, seconds(15)));
  auto job = coordinator->client().GetJob(endless->id());
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(job->state(), v1::JOB_STATE_PENDING) << job->message();
  EXPECT_EQ(job->restarts(), 0u);
  EXPECT_NE(job->message().find("remote-b is shutting down"), std::string::npos) << job->message();
}

// A worker whose coordinator never comes back trains its task to the end, then exits once
// no coordinator has answered for --orphan-timeout, and says so in its log.
TEST(RemoteWorker, AnOrphanFinishesItsTaskThenExitsAfterTheOrphanTimeout) {
  TempDir dir;
  const CoordinatorProcess::Options options = WithoutLocalWorkers(dir);
  auto coordinator = CoordinatorProcess::Start(options);
  ASSERT_NE(coordinator, nullptr);
  setenv("STOKE_FAULT_SLOW_STEP_MS", "50", 1);  // 200 steps: about 10 s of training
  WorkerProcess worker(options.address, "orphan", dir.File("worker.log"), -1,
                       {"--orphan-timeout", "2"});
  unsetenv("STOKE_FAULT_SLOW_STEP_MS");
  ASSERT_TRUE(WaitFor([&] { return HasWorker(coordinator->client(), "orphan"); }, seconds(30)));
  auto job = coordinator->client().SubmitJob(Job(200));
  ASSERT_TRUE(job.ok());
  ASSERT_TRUE(WaitFor(
      [&] { return coordinator->client().GetJob(job->id())->latest_metrics().step() >= 20; },
      seconds(30)));
  coordinator->Kill();
  // Past the timeout, but the task still trains: the worker stays.
  std::this_thread::sleep_for(std::chrono::seconds(4));
  EXPECT_TRUE(ProcessAlive(worker.pid())) << "an orphan left before its task ended";
  EXPECT_TRUE(WaitFor([&] { return !ProcessAlive(worker.pid()); }, seconds(40)))
      << "an orphan with no task kept waiting";
  std::ifstream in(dir.File("worker.log"));
  const std::string log((std::istreambuf_iterator<char>(in)), {});
  EXPECT_NE(log.find("(--orphan-timeout 2 s) and no task runs: exiting"), std::string::npos) << log;
}

}  // namespace
}  // namespace stoke::testing
