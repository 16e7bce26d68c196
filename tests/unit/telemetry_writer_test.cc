// Metric samples and log lines are written off the scheduling path: watchers still get
// every one, in order, and a telemetry write stuck on the disk holds up no RPC. A real
// SQLite store; the one fake is a disk that stalls (or a latency) on telemetry batches.
#include <gtest/gtest.h>

#include <condition_variable>
#include <future>
#include <mutex>
#include <thread>

#include "server/core/coordinator.h"
#include "server/store/sqlite_job_store.h"
#include "spec/job_spec_rules.h"
#include "tests/support/forwarding_job_store.h"
#include "tests/support/temp_dir.h"

namespace stoke::server {
namespace {

using std::chrono::seconds;

bool HoldsAStateChange(absl::Span<const JobUpdate> updates) {
  for (const auto& update : updates) {
    for (const auto& event : update.events) {
      if (event.has_state_change()) return true;
    }
  }
  return false;
}

// The real store, whose telemetry batches (batch commits of samples and log lines only)
// can be held up, and whose next batch holding a state change can fail (a full disk).
class StallingStore final : public testing::ForwardingJobStore {
 public:
  using ForwardingJobStore::ForwardingJobStore;

  void Stall() {
    std::lock_guard<std::mutex> lock(mu_);
    stalled_ = true;
  }
  void Release() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stalled_ = false;
    }
    cv_.notify_all();
  }
  // Every batch commit takes at least this long (a slow disk).
  void SetLatency(std::chrono::milliseconds latency) { latency_ = latency; }
  bool WaitForStalledWrite(std::chrono::seconds timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, timeout, [this] { return waiting_ > 0; });
  }
  int batches() {
    std::lock_guard<std::mutex> lock(mu_);
    return batches_;
  }
  // While on, every telemetry batch is refused (a read-only or full disk).
  void RefuseTelemetry(bool on) {
    std::lock_guard<std::mutex> lock(mu_);
    refuse_telemetry_ = on;
  }
  int Refusals() {
    std::lock_guard<std::mutex> lock(mu_);
    return refused_;
  }
  void FailNextStateChangeBatch() {
    std::lock_guard<std::mutex> lock(mu_);
    fail_state_change_batch_ = true;
  }
  // Batches that held a state change, each as the events it stored.
  std::vector<std::vector<v1::JobEvent>> StateChangeBatches() {
    std::lock_guard<std::mutex> lock(mu_);
    return state_change_batches_;
  }

  absl::Status CommitBatch(absl::Span<const JobUpdate> updates) override {
    if (HoldsAStateChange(updates)) {
      std::lock_guard<std::mutex> lock(mu_);
      if (fail_state_change_batch_) {
        fail_state_change_batch_ = false;
        return absl::UnavailableError("disk full");
      }
      auto status = ForwardingJobStore::CommitBatch(updates);
      if (status.ok()) {
        auto& events = state_change_batches_.emplace_back();
        for (const auto& update : updates) {
          events.insert(events.end(), update.events.begin(), update.events.end());
        }
      }
      return status;
    }
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (refuse_telemetry_) {
        ++refused_;
        return absl::InternalError("attempt to write a readonly database");
      }
      ++batches_;
      ++waiting_;
      cv_.notify_all();
      cv_.wait(lock, [this] { return !stalled_; });
      --waiting_;
    }
    std::this_thread::sleep_for(latency_);
    return ForwardingJobStore::CommitBatch(updates);
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool stalled_ = false;
  int waiting_ = 0;
  int batches_ = 0;
  bool fail_state_change_batch_ = false;
  bool refuse_telemetry_ = false;
  int refused_ = 0;
  std::vector<std::vector<v1::JobEvent>> state_change_batches_;
  std::chrono::milliseconds latency_{0};
};

class NullConnection final : public WorkerConnection {
 public:
  void Send(const v1::CoordinatorMessage&) override {}
  void Close(const std::string&) override {}
};

class TelemetryWriterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ = std::make_unique<StallingStore>(*SqliteJobStore::Open({dir_.File("stoke.db")}));
    hub_ = std::make_unique<EventHub>(*store_);
    Coordinator::Options options;
    options.tick_interval = absl::ZeroDuration();
    options.jobs_dir = dir_.File("jobs");
    options.telemetry.max_queued_events = max_queued_events_;
    options.telemetry.retry_interval = absl::Milliseconds(20);
    core_ = *Coordinator::Create(options, *store_, *hub_, clock_);
    ASSERT_TRUE(core_->Start().ok());
  }

  void TearDown() override {
    store_->Release();
    core_->Stop();
  }

  void Attach(const std::string& id) {
    v1::RegisterWorker reg;
    reg.set_worker_id(id);
    reg.mutable_device()->set_type(v1::DEVICE_TYPE_CPU);
    ASSERT_TRUE(core_->AttachWorker(reg, "10.0.0.1", std::make_shared<NullConnection>()).ok());
  }

  v1::JobSpec Spec() {
    v1::JobSpec spec;
    spec.mutable_model()->mutable_mlp();
    spec.mutable_data()->mutable_synthetic();
    spec.mutable_training()->set_steps(10);
    EXPECT_TRUE(spec::ValidateJobSpec(spec).ok());
    spec::ApplyJobSpecDefaults(spec, *spec::InspectData(spec, spec::DataRoots({})));
    return spec;
  }

  // Submits a job and has `worker` start it.
  std::string Running(const std::string& worker) {
    auto job = core_->SubmitJob(Spec());
    EXPECT_TRUE(job.ok()) << job.status();
    v1::WorkerMessage started;
    started.mutable_started()->set_job_id(job->id());
    started.mutable_started()->set_attempt(1);
    core_->HandleWorkerMessage(worker, started);
    EXPECT_EQ(core_->GetJob(job->id())->state(), v1::JOB_STATE_RUNNING);
    return job->id();
  }

  // Samples for steps first..first+count-1 and a log line naming the last.
  void Report(const std::string& worker, const std::string& job, uint64_t first, int count) {
    v1::WorkerMessage m;
    m.mutable_report()->set_job_id(job);
    m.mutable_report()->set_attempt(1);
    for (int i = 0; i < count; ++i) m.mutable_report()->add_metrics()->set_step(first + i);
    m.mutable_report()->add_logs()->set_text("through " + std::to_string(first + count - 1));
    core_->HandleWorkerMessage(worker, m);
  }

  void Finish(const std::string& worker, const std::string& job) {
    v1::WorkerMessage m;
    m.mutable_finished()->set_job_id(job);
    m.mutable_finished()->set_attempt(1);
    m.mutable_finished()->set_outcome(v1::TASK_OUTCOME_SUCCEEDED);
    core_->HandleWorkerMessage(worker, m);
  }

  stoke::testing::TempDir dir_;
  FakeClock clock_;
  size_t max_queued_events_ = 200'000;
  std::unique_ptr<StallingStore> store_;
  std::unique_ptr<EventHub> hub_;
  std::unique_ptr<Coordinator> core_;
};

TEST_F(TelemetryWriterTest, WatchersGetEverySampleAndLogLineInOrderWhileTheDiskIsSlow) {
  store_->SetLatency(std::chrono::milliseconds(5));
  Attach("w1");
  const std::string id = Running("w1");
  // A watcher reads as WatchJob does, from its own position, until the job ends.
  std::vector<v1::JobEvent> seen;
  std::thread watcher([&] {
    uint64_t next = 1;
    const auto deadline = std::chrono::steady_clock::now() + seconds(60);
    while (std::chrono::steady_clock::now() < deadline) {
      auto read = hub_->Read(id, next, 1000);
      ASSERT_TRUE(read.ok()) << read.status();
      for (auto& e : read->events) {
        next = e.seq() + 1;
        seen.push_back(std::move(e));
      }
      if (read->end_of_stream) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });
  constexpr int kReports = 300, kPerReport = 5;
  for (int r = 0; r < kReports; ++r) Report("w1", id, 1 + r * kPerReport, kPerReport);
  Finish("w1", id);
  watcher.join();
  // Every event once, in sequence order; samples and lines in the order reported; the
  // final state last.
  ASSERT_EQ(seen.size(), 3u + kReports * (kPerReport + 1) + 1);
  std::vector<uint64_t> steps;
  std::vector<std::string> lines;
  for (size_t i = 0; i < seen.size(); ++i) {
    ASSERT_EQ(seen[i].seq(), i + 1);
    if (seen[i].has_metrics()) steps.push_back(seen[i].metrics().step());
    if (seen[i].has_log()) lines.push_back(seen[i].log().text());
  }
  ASSERT_EQ(steps.size(), static_cast<size_t>(kReports * kPerReport));
  for (size_t i = 0; i < steps.size(); ++i) ASSERT_EQ(steps[i], i + 1);
  ASSERT_EQ(lines.size(), static_cast<size_t>(kReports));
  for (int r = 0; r < kReports; ++r) {
    ASSERT_EQ(lines[r], "through " + std::to_string((r + 1) * kPerReport));
  }
  EXPECT_EQ(seen.back().state_change().state(), v1::JOB_STATE_SUCCEEDED);
  // The store holds the same history, written in far fewer transactions than reports.
  auto stored = store_->ReadEvents(id, 1, 10'000);
  ASSERT_TRUE(stored.ok());
  ASSERT_EQ(stored->size(), seen.size());
  for (size_t i = 0; i < seen.size(); ++i) {
    EXPECT_EQ((*stored)[i].SerializeAsString(), seen[i].SerializeAsString());
  }
  EXPECT_LT(store_->batches(), kReports);
  EXPECT_EQ(core_->GetCluster().telemetry_events_dropped(), 0u);
}

TEST_F(TelemetryWriterTest, ATelemetryWriteStuckOnTheDiskHoldsUpNoRpc) {
  Attach("w1");
  const std::string busy = Running("w1");
  Attach("w2");
  store_->Stall();
  Report("w1", busy, 1, 10);
  ASSERT_TRUE(store_->WaitForStalledWrite(seconds(10)));
  // More reports arrive meanwhile: queued, not waited for.
  auto reported = std::async(std::launch::async, [&] { Report("w1", busy, 11, 10); });
  ASSERT_EQ(reported.wait_for(seconds(2)), std::future_status::ready)
      << "a report waited on the disk";
  auto submitted = std::async(std::launch::async, [&] { return core_->SubmitJob(Spec()); });
  ASSERT_EQ(submitted.wait_for(seconds(2)), std::future_status::ready)
      << "SubmitJob waited on a telemetry write";
  auto job = submitted.get();
  ASSERT_TRUE(job.ok()) << job.status();
  // Scheduled at once on the free worker: a state change of another job.
  EXPECT_EQ(job->state(), v1::JOB_STATE_SCHEDULED);
  auto got = std::async(std::launch::async, [&] { return core_->GetJob(busy); });
  ASSERT_EQ(got.wait_for(seconds(2)), std::future_status::ready);
  EXPECT_EQ(got.get()->latest_metrics().step(), 20u) << "memory is current";
  EXPECT_GT(core_->GetCluster().telemetry_events_queued(), 0u);

  store_->Release();
  core_->FlushTelemetry();
  auto stored = store_->ReadEvents(busy, 1, 1000);
  ASSERT_TRUE(stored.ok());
  size_t samples = 0;
  for (const auto& e : *stored) samples += e.has_metrics();
  EXPECT_EQ(samples, 20u);
  EXPECT_EQ(core_->GetCluster().telemetry_events_queued(), 0u);
}

// What a watcher reading from the first event gets, up to the end of the job's stream.
std::vector<v1::JobEvent> Watched(EventHub& hub, const std::string& id) {
  auto read = hub.Read(id, 1, 10'000);
  EXPECT_TRUE(read.ok()) << read.status();
  return read.ok() ? read->events : std::vector<v1::JobEvent>{};
}

void ExpectSameEvents(const std::vector<v1::JobEvent>& a, const std::vector<v1::JobEvent>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].SerializeAsString(), b[i].SerializeAsString()) << "event " << i;
  }
}

TEST_F(TelemetryWriterTest, AStateChangeStoresItsJobsQueuedReportsInItsOwnTransaction) {
  Attach("w1");
  const std::string stuck = Running("w1");
  Attach("w2");
  const std::string id = Running("w2");
  store_->Stall();
  Report("w1", stuck, 1, 10);
  ASSERT_TRUE(store_->WaitForStalledWrite(seconds(10)));
  Report("w2", id, 1, 5);  // queued behind the stuck batch
  Report("w2", id, 6, 5);
  auto finished = std::async(std::launch::async, [&] { Finish("w2", id); });
  const bool prompt = finished.wait_for(seconds(2)) == std::future_status::ready;
  store_->Release();
  finished.get();
  ASSERT_TRUE(prompt) << "the state change waited for another job's telemetry batch";
  EXPECT_EQ(core_->GetJob(id)->state(), v1::JOB_STATE_SUCCEEDED);
  // One transaction: the job's 12 reported events, then its final state.
  const auto batches = store_->StateChangeBatches();
  ASSERT_EQ(batches.size(), 1u);
  ASSERT_EQ(batches[0].size(), 13u);
  EXPECT_EQ(batches[0].front().metrics().step(), 1u);
  EXPECT_EQ(batches[0].back().state_change().state(), v1::JOB_STATE_SUCCEEDED);
  // The store and a watcher hold every event once, in sequence order.
  auto stored = store_->ReadEvents(id, 1, 1000);
  ASSERT_TRUE(stored.ok());
  ASSERT_EQ(stored->size(), 3u + 12u + 1u);
  for (size_t i = 0; i < stored->size(); ++i) EXPECT_EQ((*stored)[i].seq(), i + 1);
  ExpectSameEvents(Watched(*hub_, id), *stored);
  // The other job's batch, once the disk came back, lost nothing either.
  core_->FlushTelemetry();
  auto other = store_->ReadEvents(stuck, 1, 1000);
  ASSERT_TRUE(other.ok());
  EXPECT_EQ(other->size(), 3u + 11u);
}

TEST_F(TelemetryWriterTest, AStateChangeTheStoreRefusesLeavesItsReportsToBeWrittenLater) {
  Attach("w1");
  const std::string stuck = Running("w1");
  Attach("w2");
  const std::string id = Running("w2");
  store_->Stall();
  Report("w1", stuck, 1, 10);
  ASSERT_TRUE(store_->WaitForStalledWrite(seconds(10)));
  Report("w2", id, 1, 5);
  store_->FailNextStateChangeBatch();
  Finish("w2", id);  // not stored: the job stays RUNNING, its move kept to try again
  EXPECT_EQ(core_->GetJob(id)->state(), v1::JOB_STATE_RUNNING);
  store_->Release();
  core_->FlushTelemetry();
  // The reports were given back to the telemetry writer, which stored and published them.
  auto stored = store_->ReadEvents(id, 1, 1000);
  ASSERT_TRUE(stored.ok());
  ASSERT_EQ(stored->size(), 3u + 6u);
  EXPECT_EQ(stored->back().log().text(), "through 5");
  ExpectSameEvents(Watched(*hub_, id), *stored);
  core_->Tick();  // tries the move again; the store takes it now
  EXPECT_EQ(core_->GetJob(id)->state(), v1::JOB_STATE_SUCCEEDED);
  stored = store_->ReadEvents(id, 1, 1000);
  ASSERT_TRUE(stored.ok());
  ASSERT_EQ(stored->size(), 3u + 6u + 1u);
  for (size_t i = 0; i < stored->size(); ++i) EXPECT_EQ((*stored)[i].seq(), i + 1);
  EXPECT_EQ(stored->back().state_change().state(), v1::JOB_STATE_SUCCEEDED);
  ExpectSameEvents(Watched(*hub_, id), *stored);
  EXPECT_EQ(core_->GetCluster().telemetry_events_dropped(), 0u);
}

TEST_F(TelemetryWriterTest, WatchersSeeOnlyWhatTheStoreTookAndARefusedBatchIsTriedAgain) {
  Attach("w1");
  const std::string id = Running("w1");
  const size_t before = Watched(*hub_, id).size();  // submitted, scheduled, running
  store_->RefuseTelemetry(true);
  Report("w1", id, 1, 10);
  const auto deadline = std::chrono::steady_clock::now() + seconds(10);
  while (store_->Refusals() < 3 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_GE(store_->Refusals(), 3) << "the refused batch was not tried again";
  // Nothing the store refused has reached a watcher.
  EXPECT_EQ(Watched(*hub_, id).size(), before);
  store_->RefuseTelemetry(false);
  core_->FlushTelemetry();
  auto stored = store_->ReadEvents(id, 1, 1000);
  ASSERT_TRUE(stored.ok());
  ASSERT_EQ(stored->size(), before + 11u);
  for (size_t i = 0; i < stored->size(); ++i) EXPECT_EQ((*stored)[i].seq(), i + 1);
  ExpectSameEvents(Watched(*hub_, id), *stored);
  // The job's own moves follow, numbered after them.
  Finish("w1", id);
  stored = store_->ReadEvents(id, 1, 1000);
  ASSERT_TRUE(stored.ok());
  EXPECT_EQ(stored->back().seq(), before + 12u);
  EXPECT_EQ(core_->GetCluster().telemetry_events_dropped(), 0u);
}

class SmallTelemetryQueueTest : public TelemetryWriterTest {
 protected:
  void SetUp() override {
    max_queued_events_ = 30;
    TelemetryWriterTest::SetUp();
  }
};

TEST_F(SmallTelemetryQueueTest, AFullQueueDropsAndCountsReportsButLeavesNoHoleInTheSequence) {
  Attach("w1");
  const std::string id = Running("w1");
  store_->Stall();
  Report("w1", id, 1, 10);  // 11 events, being written
  ASSERT_TRUE(store_->WaitForStalledWrite(seconds(10)));
  Report("w1", id, 11, 10);  // queued: 22
  Report("w1", id, 21, 10);  // would make 33: dropped
  EXPECT_EQ(core_->GetCluster().telemetry_events_dropped(), 11u);
  store_->Release();
  core_->FlushTelemetry();
  Report("w1", id, 31, 10);
  Finish("w1", id);
  auto stored = store_->ReadEvents(id, 1, 1000);
  ASSERT_TRUE(stored.ok());
  std::vector<uint64_t> steps;
  for (size_t i = 0; i < stored->size(); ++i) {
    EXPECT_EQ((*stored)[i].seq(), i + 1) << "a hole in the sequence";
    if ((*stored)[i].has_metrics()) steps.push_back((*stored)[i].metrics().step());
  }
  ASSERT_EQ(steps.size(), 30u);
  EXPECT_EQ(steps[19], 20u);
  EXPECT_EQ(steps[20], 31u) << "steps 21 to 30 were dropped";
}

}  // namespace
}  // namespace stoke::server
