// Workers outlive the coordinator, end to end with real processes: a coordinator and its
// local CPU worker train a job; the coordinator is stopped (SIGTERM) or killed (SIGKILL)
// and started again on the same data dir and address. The job must carry on where it
// was, with no attempt lost and its metrics continuing from the step reached, and a
// watcher must resume without a gap. A job whose worker dies while no coordinator runs
// goes back to the queue once the heartbeat timeout has passed. A coordinator frozen past
// the heartbeat timeout does not blame its workers for its own silence.
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <thread>

#include "tests/support/coordinator_process.h"
#include "tests/support/temp_dir.h"
#include "tests/support/wait.h"

namespace stoke::testing {
namespace {

using std::chrono::seconds;

constexpr uint32_t kMetricsInterval = 20;
constexpr int kHeartbeatTimeoutSeconds = 8;

v1::JobSpec SmallJob(uint64_t steps) {
  v1::JobSpec spec;
  spec.set_name("long");
  spec.mutable_model()->mutable_mlp()->add_hidden(32);
  spec.mutable_data()->mutable_synthetic()->set_features(16);
  spec.mutable_training()->set_steps(steps);
  spec.mutable_training()->set_batch_size(32);
  spec.mutable_metrics()->set_interval_steps(kMetricsInterval);
  spec.mutable_resources()->set_gpus(1);
  return spec;
}

// Joins a thread however the test ends, after asking it to stop.
struct Joined {
  std::thread& thread;
  std::atomic<bool>& stop;
  ~Joined() {
    stop = true;
    if (thread.joinable()) thread.join();
  }
};

class RideThroughTest : public ::testing::Test {
 protected:
  CoordinatorProcess::Options Options(const std::string& local_workers = "cpu:1") {
    CoordinatorProcess::Options options;
    options.data_dir = dir_.path();
    options.address = address_;
    options.local_workers = local_workers;
    options.extra_args = {"--heartbeat-timeout", std::to_string(kHeartbeatTimeoutSeconds)};
    options.stop_workers_on_exit = false;
    return options;
  }

  void Start(const std::string& local_workers = "cpu:1") {
    coordinator_ = CoordinatorProcess::Start(Options(local_workers));
    ASSERT_NE(coordinator_, nullptr);
  }

  void TearDown() override {
    if (coordinator_) coordinator_->Stop();
    // Whatever the test left training goes with it.
    RunCommand({STOKE_COORDINATOR_BINARY, "--stop-workers", "--data-dir", dir_.path()});
  }

  client::Client& client() { return coordinator_->client(); }

  v1::Job Job(const std::string& id) {
    auto job = client().GetJob(id);
    return job.ok() ? *job : v1::Job();
  }

  // The steps of the job's training samples and the sequence numbers of all its events,
  // as a fresh watch replays them from the store.
  void History(const std::string& id, std::vector<uint64_t>* steps, std::vector<uint64_t>* seqs) {
    auto status = client().WatchJob(id, {}, [&](const v1::JobEvent& e) {
      seqs->push_back(e.seq());
      if (e.has_metrics() && !e.metrics().has_eval()) steps->push_back(e.metrics().step());
      return true;
    });
    EXPECT_TRUE(status.ok()) << status;
  }

  // Trains a job through one coordinator restart (`signal` ends the first coordinator)
  // while a watcher follows it, and checks nothing was lost.
  // Steps this machine trains SmallJob at in `duration` (measured: CPU speed varies a lot
  // between machines and loads, and the job must outlast a restart but not much more).
  uint64_t StepsIn(std::chrono::seconds duration) {
    auto probe = client().SubmitJob(SmallJob(1'000'000'000));
    EXPECT_TRUE(probe.ok()) << probe.status();
    if (!probe.ok()) return 0;
    uint64_t first = 0;
    EXPECT_TRUE(WaitFor([&] { return (first = Job(probe->id()).latest_metrics().step()) > 0; },
                        seconds(60)));
    const auto began = std::chrono::steady_clock::now();
    std::this_thread::sleep_for(seconds(3));
    const uint64_t last = Job(probe->id()).latest_metrics().step();
    const double per_second =
        (last - first) /
        std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
    client().CancelJob(probe->id()).IgnoreError();
    EXPECT_TRUE(
        WaitFor([&] { return client().GetCluster()->workers(0).state() == v1::WORKER_STATE_IDLE; },
                seconds(30)));
    const uint64_t steps = static_cast<uint64_t>(per_second * duration.count());
    return std::max<uint64_t>(kMetricsInterval * 20, steps / kMetricsInterval * kMetricsInterval);
  }

  void TrainThroughRestart(int signal) {
    Start();
    const uint64_t total = StepsIn(seconds(25));
    auto submitted = client().SubmitJob(SmallJob(total));
    ASSERT_TRUE(submitted.ok()) << submitted.status();
    const std::string id = submitted->id();
    ASSERT_TRUE(WaitFor([&] { return Job(id).latest_metrics().step() >= 5 * kMetricsInterval; },
                        seconds(60)))
        << coordinator_->Log();
    ASSERT_EQ(Job(id).state(), v1::JOB_STATE_RUNNING) << "the job was too short for this test";
    const pid_t worker_pid = static_cast<pid_t>(client().GetCluster()->workers(0).pid());

    // A watcher of its own connection, reconnecting by itself through the restart.
    std::vector<uint64_t> watched;
    std::atomic<bool> stop_watching{false};
    absl::Status watch_status;
    std::thread watcher([&, address = coordinator_->address()] {
      client::ClientOptions options;
      options.address = address;
      auto watching = client::Client::Connect(options);
      if (!watching.ok()) {
        watch_status = watching.status();
        return;
      }
      client::WatchOptions watch;
      watch.reconnect_for = std::chrono::seconds(60);
      watch_status = (*watching)->WatchJob(id, watch, [&](const v1::JobEvent& e) {
        watched.push_back(e.seq());
        return !stop_watching.load();
      });
    });
    Joined joined{watcher, stop_watching};

    const uint64_t step_before = Job(id).latest_metrics().step();
    if (signal == SIGKILL) {
      coordinator_->Kill();
    } else {
      ASSERT_EQ(coordinator_->Stop(), 0);
    }
    coordinator_.reset();
    // No coordinator: the worker trains on.
    std::this_thread::sleep_for(seconds(2));
    ASSERT_TRUE(ProcessAlive(worker_pid)) << "the worker died with its coordinator";
    Start();
    // The same process took the job back; no duplicate was started on its device.
    auto cluster = client().GetCluster();
    ASSERT_TRUE(cluster.ok());
    ASSERT_EQ(cluster->workers_size(), 1);
    EXPECT_EQ(static_cast<pid_t>(cluster->workers(0).pid()), worker_pid);
    ASSERT_TRUE(WaitFor([&] { return Job(id).latest_metrics().step() > step_before; }, seconds(30)))
        << coordinator_->Log();

    ASSERT_TRUE(WaitFor([&] { return Job(id).state() == v1::JOB_STATE_SUCCEEDED; }, seconds(240)))
        << v1::JobState_Name(Job(id).state()) << "\n"
        << coordinator_->Log();
    v1::Job done = Job(id);
    EXPECT_EQ(done.attempt(), 1u) << "the job was started again";
    EXPECT_EQ(done.restarts(), 0u);

    std::vector<uint64_t> steps, seqs;
    History(id, &steps, &seqs);
    ASSERT_FALSE(steps.empty());
    // Sequence numbers run on without a hole or a repeat.
    for (size_t i = 0; i < seqs.size(); ++i) ASSERT_EQ(seqs[i], i + 1) << "at event " << i;
    // Steps only go forward: training was never started over.
    for (size_t i = 1; i < steps.size(); ++i) {
      ASSERT_GT(steps[i], steps[i - 1]) << "metrics went back from step " << steps[i - 1];
    }
    EXPECT_EQ(steps.back(), total);
    // Every sample once, none lost: what the old coordinator had received but not stored
    // the worker sent again, and the new one applied once.
    ASSERT_EQ(steps.front(), kMetricsInterval);
    for (size_t i = 1; i < steps.size(); ++i) {
      ASSERT_EQ(steps[i], steps[i - 1] + kMetricsInterval) << "a sample is missing";
    }

    watcher.join();
    ASSERT_TRUE(watch_status.ok()) << watch_status;
    ASSERT_FALSE(watched.empty());
    // The watcher resumed where it was: every event once, in order.
    ASSERT_EQ(watched, seqs);
  }

  TempDir dir_;
  std::string address_ = "127.0.0.1:" + std::to_string(FreePort());
  std::unique_ptr<CoordinatorProcess> coordinator_;
};

TEST_F(RideThroughTest, JobTrainsOnThroughACoordinatorStoppedWithSigterm) {
  TrainThroughRestart(SIGTERM);
}

TEST_F(RideThroughTest, JobTrainsOnThroughACoordinatorKilledWithSigkill) {
  TrainThroughRestart(SIGKILL);
}

TEST_F(RideThroughTest, ACoordinatorStoppedLongerThanTheHeartbeatTimeoutBlamesNoWorker) {
  Start();
  auto submitted = client().SubmitJob(SmallJob(1'000'000'000));
  ASSERT_TRUE(submitted.ok()) << submitted.status();
  const std::string id = submitted->id();
  ASSERT_TRUE(WaitFor([&] { return Job(id).latest_metrics().step() > 0; }, seconds(60)))
      << coordinator_->Log();
  // Frozen (as a paused VM or SIGSTOP leaves it) for twice the heartbeat timeout, while
  // its worker trains on.
  ASSERT_EQ(kill(coordinator_->pid(), SIGSTOP), 0);
  std::this_thread::sleep_for(seconds(2 * kHeartbeatTimeoutSeconds));
  ASSERT_EQ(kill(coordinator_->pid(), SIGCONT), 0);
  const uint64_t step_at_wake = Job(id).latest_metrics().step();
  // A whole timeout after the wake, the worker is still the job's, on its first attempt.
  std::this_thread::sleep_for(seconds(kHeartbeatTimeoutSeconds + 2));
  const v1::Job job = Job(id);
  EXPECT_EQ(job.state(), v1::JOB_STATE_RUNNING) << job.message() << coordinator_->Log();
  EXPECT_EQ(job.attempt(), 1u);
  EXPECT_EQ(job.restarts(), 0u) << job.message();
  EXPECT_GT(job.latest_metrics().step(), step_at_wake);
  EXPECT_NE(coordinator_->Log().find("the coordinator stood still for"), std::string::npos)
      << coordinator_->Log();
  client().CancelJob(id).IgnoreError();
}

TEST_F(RideThroughTest, JobWhoseWorkerDiesWhileNoCoordinatorRunsIsRequeuedAfterTheTimeout) {
  Start("0");
  WorkerProcess worker(address_, "remote-1", dir_.File("worker-1.log"));
  ASSERT_TRUE(WaitFor([&] { return client().GetCluster()->workers_size() == 1; }, seconds(60)));
  auto submitted = client().SubmitJob(SmallJob(1'000'000'000));
  ASSERT_TRUE(submitted.ok()) << submitted.status();
  const std::string id = submitted->id();
  ASSERT_TRUE(WaitFor([&] { return Job(id).latest_metrics().step() > 0; }, seconds(60)))
      << coordinator_->Log();

  coordinator_->Kill();
  coordinator_.reset();
  worker.Kill(SIGKILL);
  const auto restarted = std::chrono::steady_clock::now();
  Start("0");
  // Its worker gets the heartbeat timeout to come back; until then the job stays put.
  EXPECT_EQ(Job(id).state(), v1::JOB_STATE_RUNNING);
  ASSERT_TRUE(WaitFor([&] { return Job(id).state() == v1::JOB_STATE_PENDING; }, seconds(30)))
      << coordinator_->Log();
  EXPECT_GE(std::chrono::steady_clock::now() - restarted, seconds(kHeartbeatTimeoutSeconds - 1));
  v1::Job job = Job(id);
  EXPECT_EQ(job.restarts(), 0u) << "not the job's fault";
  EXPECT_NE(job.message().find("did not come back"), std::string::npos) << job.message();
  // A worker that does come takes it, as a new attempt.
  WorkerProcess replacement(address_, "remote-2", dir_.File("worker-2.log"));
  ASSERT_TRUE(WaitFor(
      [&] {
        v1::Job j = Job(id);
        return j.state() == v1::JOB_STATE_RUNNING && j.attempt() == 2;
      },
      seconds(60)))
      << coordinator_->Log();
  client().CancelJob(id).IgnoreError();
}

TEST_F(RideThroughTest, StopWorkersEndsTheWorkersACoordinatorLeftTraining) {
  Start();
  const pid_t worker_pid = static_cast<pid_t>(client().GetCluster()->workers(0).pid());
  ASSERT_EQ(coordinator_->Stop(), 0);
  coordinator_.reset();
  ASSERT_TRUE(ProcessAlive(worker_pid));
  CommandResult stopped =
      RunCommand({STOKE_COORDINATOR_BINARY, "--stop-workers", "--data-dir", dir_.path()});
  EXPECT_EQ(stopped.exit_code, 0) << stopped.err;
  EXPECT_TRUE(WaitFor([&] { return !ProcessAlive(worker_pid); }, seconds(15)));
}

}  // namespace
}  // namespace stoke::testing
