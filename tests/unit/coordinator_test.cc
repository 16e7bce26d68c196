// The coordinator's core flows, driven directly with a fake clock and recording worker
// connections (the network edge), over a real SQLite store.
#include "server/core/coordinator.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <future>
#include <mutex>
#include <set>
#include <thread>

#include "server/store/sqlite_job_store.h"
#include "spec/job_spec_rules.h"
#include "tests/support/forwarding_job_store.h"
#include "tests/support/temp_dir.h"

namespace stoke::server {
namespace {

// Records what the coordinator sends to one worker.
class RecordingConnection final : public WorkerConnection {
 public:
  void Send(const v1::CoordinatorMessage& message) override { sent.push_back(message); }
  void Close(const std::string& reason) override { closed_because = reason; }

  std::vector<v1::Assignment> Assignments() const {
    std::vector<v1::Assignment> out;
    for (const auto& m : sent) {
      if (m.has_assignment()) out.push_back(m.assignment());
    }
    return out;
  }
  std::vector<v1::CancelTask> Cancels() const {
    std::vector<v1::CancelTask> out;
    for (const auto& m : sent) {
      if (m.has_cancel()) out.push_back(m.cancel());
    }
    return out;
  }
  std::vector<v1::PreemptTask> Preempts() const {
    std::vector<v1::PreemptTask> out;
    for (const auto& m : sent) {
      if (m.has_preempt()) out.push_back(m.preempt());
    }
    return out;
  }

  std::vector<v1::CoordinatorMessage> sent;
  std::string closed_because;
};

// The real store, which a test can make refuse every write as a full disk does (the one
// fake here is the failure; SqliteJobStoreTest fills a real store to the same error).
class FillableStore final : public testing::ForwardingJobStore {
 public:
  using ForwardingJobStore::ForwardingJobStore;
  bool full = false;
  bool full_for_batches = false;  // refuses only CommitBatch
  int transactions = 0;           // Commit and CommitBatch calls stored

  absl::StatusOr<v1::Job> CreateJob(v1::Job job, absl::Span<const v1::JobEvent> events) override {
    if (full) return Full();
    return ForwardingJobStore::CreateJob(std::move(job), events);
  }
  absl::StatusOr<v1::Job> CreateAuditedJob(v1::Job job, absl::Span<const v1::JobEvent> events,
                                           v1::AuditEntry audit) override {
    if (full) return Full();
    return ForwardingJobStore::CreateAuditedJob(std::move(job), events, std::move(audit));
  }
  absl::Status Commit(const v1::Job& job, absl::Span<const v1::JobEvent> events) override {
    if (full) return Full();
    ++transactions;
    return ForwardingJobStore::Commit(job, events);
  }
  absl::Status CommitBatch(absl::Span<const JobUpdate> updates) override {
    if (full || full_for_batches) return Full();
    ++transactions;
    return ForwardingJobStore::CommitBatch(updates);
  }
  absl::Status AppendAudit(const v1::AuditEntry& entry) override {
    if (full) return Full();
    return ForwardingJobStore::AppendAudit(entry);
  }
  absl::StatusOr<std::string> BindWorkerCredential(const std::string& worker_id,
                                                   const std::string& credential) override {
    if (full) return Full();
    return ForwardingJobStore::BindWorkerCredential(worker_id, credential);
  }

 private:
  static absl::Status Full() {
    return absl::ResourceExhaustedError("job store: database or disk is full");
  }
};

class CoordinatorTest : public ::testing::Test {
 protected:
  void SetUp() override { Open(); }

  void Open() {
    core_.reset();
    hub_.reset();
    store_.reset();
    store_ = std::make_unique<FillableStore>(*SqliteJobStore::Open({dir_.File("stoke.db")}));
    hub_ = std::make_unique<EventHub>(*store_);
    Coordinator::Options options;
    options.heartbeat_timeout = absl::Seconds(10);
    options.heartbeat_interval = absl::Seconds(2);
    options.tick_interval = absl::ZeroDuration();  // the test calls Tick
    // The tests move the clock by seconds between ticks, which a running coordinator
    // would take for a stall of its own; stall_threshold_ is set where that is the point.
    options.stall_threshold = stall_threshold_;
    options.start_timeout = start_timeout_;
    options.jobs_dir = dir_.File("jobs");
    options.max_job_bytes_per_owner = max_job_bytes_per_owner_;
    core_ = *Coordinator::Create(options, *store_, *hub_, clock_);
    ASSERT_TRUE(core_->Start().ok());
  }

  std::shared_ptr<RecordingConnection> Attach(const std::string& id) {
    auto connection = std::make_shared<RecordingConnection>();
    v1::RegisterWorker reg;
    reg.set_worker_id(id);
    reg.set_host("host");
    reg.mutable_device()->set_type(v1::DEVICE_TYPE_CPU);
    EXPECT_TRUE(core_->AttachWorker(reg, "10.0.0." + std::to_string(++attached_), connection).ok());
    connections_.push_back(connection);
    return connection;
  }

  // The key of `job`'s `attempt` as its worker was assigned it ("" if none was).
  std::string KeyOf(const std::string& job, uint32_t attempt) const {
    for (const auto& connection : connections_) {
      for (const auto& a : connection->Assignments()) {
        if (a.job_id() == job && a.attempt() == attempt) return a.task_key();
      }
    }
    return "";
  }

  // Worker `id` registers holding `held` (none when its job is empty); what it is told.
  absl::Status TryAttach(const std::string& id, const v1::HeldTask& held) {
    v1::RegisterWorker reg;
    reg.set_worker_id(id);
    reg.set_host("host");
    reg.mutable_device()->set_type(v1::DEVICE_TYPE_CPU);
    if (!held.job_id().empty()) *reg.mutable_held_task() = held;
    return core_->AttachWorker(reg, "10.0.0.99", std::make_shared<RecordingConnection>());
  }

  // Worker `id` (re)registers holding `attempt` of `job`, as one that trained on without
  // its link does.
  std::shared_ptr<RecordingConnection> Reattach(const std::string& id, const std::string& job,
                                                uint32_t attempt, bool started = true) {
    auto connection = std::make_shared<RecordingConnection>();
    v1::RegisterWorker reg;
    reg.set_worker_id(id);
    reg.set_host("host");
    reg.mutable_device()->set_type(v1::DEVICE_TYPE_CPU);
    reg.mutable_held_task()->set_job_id(job);
    reg.mutable_held_task()->set_attempt(attempt);
    reg.mutable_held_task()->set_started(started);
    reg.mutable_held_task()->set_task_key(KeyOf(job, attempt));
    EXPECT_TRUE(core_->AttachWorker(reg, "10.0.0.1", connection).ok());
    connections_.push_back(connection);
    return connection;
  }

  std::string Submit(uint32_t devices = 1, std::optional<uint32_t> max_restarts = std::nullopt) {
    v1::JobSpec spec;
    spec.mutable_model()->mutable_mlp();
    spec.mutable_data()->mutable_synthetic();
    spec.mutable_training()->set_steps(10);
    spec.mutable_resources()->set_gpus(devices);
    if (max_restarts) spec.set_max_restarts(*max_restarts);
    EXPECT_TRUE(spec::ValidateJobSpec(spec).ok());
    spec::ApplyJobSpecDefaults(spec, *spec::InspectData(spec, spec::DataRoots({})));
    auto job = core_->SubmitJob(spec);
    EXPECT_TRUE(job.ok()) << job.status();
    return job->id();
  }

  void Send(const std::string& worker, v1::WorkerMessage message) {
    core_->HandleWorkerMessage(worker, message);
  }
  void Started(const std::string& worker, const std::string& job, uint32_t attempt) {
    v1::WorkerMessage m;
    m.mutable_started()->set_job_id(job);
    m.mutable_started()->set_attempt(attempt);
    Send(worker, m);
  }
  void Finished(const std::string& worker, const std::string& job, uint32_t attempt,
                v1::TaskOutcome outcome, bool retryable = true) {
    v1::WorkerMessage m;
    auto* f = m.mutable_finished();
    f->set_job_id(job);
    f->set_attempt(attempt);
    f->set_outcome(outcome);
    f->set_message("done");
    f->set_retryable(retryable);
    Send(worker, m);
  }

  // The worker says it is shutting down; with a grace, it lets its task stop at a step
  // boundary first.
  void Leave(const std::string& worker, const std::string& reason, uint32_t stop_grace_ms = 0) {
    v1::WorkerMessage m;
    m.mutable_leaving()->set_reason(reason);
    m.mutable_leaving()->set_stop_grace_ms(stop_grace_ms);
    Send(worker, m);
  }

  v1::Job GetJob(const std::string& id) { return *core_->GetJob(id); }
  v1::WorkerState WorkerState(const std::string& id) {
    const v1::Cluster cluster = core_->GetCluster();
    for (const auto& w : cluster.workers()) {
      if (w.id() == id) return w.state();
    }
    return v1::WORKER_STATE_UNSPECIFIED;
  }

  stoke::testing::TempDir dir_;
  FakeClock clock_;
  absl::Duration start_timeout_ = absl::Minutes(10);
  absl::Duration stall_threshold_ = absl::InfiniteDuration();
  uint64_t max_job_bytes_per_owner_ = 0;
  std::unique_ptr<FillableStore> store_;
  std::unique_ptr<EventHub> hub_;
  std::unique_ptr<Coordinator> core_;
  int attached_ = 0;  // workers attached so far: worker N connects from 10.0.0.N
  std::vector<std::shared_ptr<RecordingConnection>> connections_;  // every one, for KeyOf
};

// Past --max-job-bytes-per-owner, an owner's running job fails naming the limit, its
// next submission is refused and its queued jobs wait; cleared folders let them go on. A
// link planted in a folder counts nothing.
TEST_F(CoordinatorTest, AnOwnerOverTheDiskQuotaIsStoppedUntilItsFoldersAreCleared) {
  max_job_bytes_per_owner_ = 1 << 20;
  Open();
  auto w = Attach("w1");
  const std::string running = Submit();
  Started("w1", running, 1);
  const std::string queued = Submit();
  ASSERT_EQ(GetJob(running).state(), v1::JOB_STATE_RUNNING);
  const std::string step = dir_.File("jobs/" + running + "/checkpoints/step-10");
  std::filesystem::create_directories(step);
  const std::string elsewhere = dir_.File("big-file-elsewhere");
  std::ofstream(elsewhere) << std::string(4 << 20, 'x');
  std::filesystem::create_symlink(elsewhere, step + "/model.pt");
  core_->MeasureJobFolders();
  EXPECT_EQ(GetJob(running).state(), v1::JOB_STATE_RUNNING) << "a link counted what it names";

  std::filesystem::remove(step + "/model.pt");
  std::ofstream(step + "/model.pt") << std::string(2 << 20, 'x');
  core_->MeasureJobFolders();
  const v1::Job failed = GetJob(running);
  EXPECT_EQ(failed.state(), v1::JOB_STATE_FAILED);
  EXPECT_NE(
      failed.message().find("hold 2.0 MiB, over the limit of 1.0 MiB (--max-job-bytes-per-owner)"),
      std::string::npos)
      << failed.message();
  EXPECT_EQ(failed.restarts(), 0u);
  Finished("w1", running, 1, v1::TASK_OUTCOME_CANCELLED);
  core_->Tick();
  EXPECT_EQ(GetJob(queued).state(), v1::JOB_STATE_PENDING) << "placed while over the quota";
  EXPECT_NE(GetJob(queued).message().find("job folders (with their jobs' logs) hold"),
            std::string::npos);
  v1::JobSpec spec = GetJob(queued).spec();
  EXPECT_EQ(core_->SubmitJob(spec).status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(core_->SubmitJob(spec, "", "bob").ok()) << "another owner was held back";

  std::filesystem::remove_all(dir_.File("jobs/" + running));
  core_->MeasureJobFolders();
  core_->Tick();
  EXPECT_TRUE(GetJob(queued).state() == v1::JOB_STATE_SCHEDULED ||
              GetJob(queued).message().find("job folders (with their jobs' logs) hold") ==
                  std::string::npos);
  EXPECT_TRUE(core_->SubmitJob(spec).ok());
}

TEST_F(CoordinatorTest, JobRunsOnAnIdleWorkerToSuccess) {
  auto w = Attach("w1");
  ASSERT_TRUE(w->sent[0].has_registered());
  std::string id = Submit();
  ASSERT_EQ(w->Assignments().size(), 1u);
  EXPECT_EQ(w->Assignments()[0].job_id(), id);
  EXPECT_EQ(w->Assignments()[0].attempt(), 1u);
  EXPECT_EQ(GetJob(id).state(), v1::JOB_STATE_SCHEDULED);
  EXPECT_EQ(WorkerState("w1"), v1::WORKER_STATE_BUSY);
  Started("w1", id, 1);
  EXPECT_EQ(GetJob(id).state(), v1::JOB_STATE_RUNNING);
  Finished("w1", id, 1, v1::TASK_OUTCOME_SUCCEEDED);
  EXPECT_EQ(GetJob(id).state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(WorkerState("w1"), v1::WORKER_STATE_IDLE);
}

// The disk fills while jobs run: what their workers report (started, finished, failed)
// is not lost, only stored late, once there is room again; until then the jobs keep the
// state the store has, and nothing acts on the new one.
TEST_F(CoordinatorTest, StateChangesTheStoreRefusedAreStoredOnceItHasRoomAgain) {
  Attach("w1");
  Attach("w2");
  const std::string finishing = Submit();
  const std::string failing = Submit(1, /*max_restarts=*/1);
  Started("w1", finishing, 1);
  store_->full = true;
  Started("w2", failing, 1);  // its RUNNING cannot be stored
  Finished("w1", finishing, 1, v1::TASK_OUTCOME_SUCCEEDED);
  Finished("w2", failing, 1, v1::TASK_OUTCOME_FAILED);
  core_->Tick();  // still full
  EXPECT_EQ(GetJob(finishing).state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(GetJob(failing).state(), v1::JOB_STATE_SCHEDULED);
  EXPECT_EQ(GetJob(failing).attempt(), 1u) << "restarted before its failure was stored";
  EXPECT_EQ(WorkerState("w1"), v1::WORKER_STATE_IDLE);

  store_->full = false;
  core_->Tick();
  v1::Job done = GetJob(finishing);
  EXPECT_EQ(done.state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(done.message(), "done");
  // The failed job went RUNNING, then RESTARTING (one restart), and was started again.
  v1::Job retried = GetJob(failing);
  EXPECT_EQ(retried.restarts(), 1u);
  EXPECT_EQ(retried.state(), v1::JOB_STATE_SCHEDULED);
  EXPECT_EQ(retried.attempt(), 2u);
  std::vector<v1::JobState> states;
  const auto events = store_->ReadEvents(failing, 1, 100);
  ASSERT_TRUE(events.ok()) << events.status();
  for (const auto& e : *events) {
    if (e.has_state_change()) states.push_back(e.state_change().state());
  }
  EXPECT_EQ(states, (std::vector<v1::JobState>{v1::JOB_STATE_PENDING, v1::JOB_STATE_SCHEDULED,
                                               v1::JOB_STATE_RUNNING, v1::JOB_STATE_RESTARTING,
                                               v1::JOB_STATE_SCHEDULED}));
  // A new coordinator on the same store finds what the first one stored.
  Open();
  EXPECT_EQ(GetJob(finishing).state(), v1::JOB_STATE_SUCCEEDED);
}

TEST_F(CoordinatorTest, GangWaitsForAllItsDevicesThenGetsRanks) {
  auto w1 = Attach("w1");
  std::string small = Submit(1);
  std::string gang = Submit(2);
  auto w2 = Attach("w2");
  // One device is busy with the small job: the gang must not start on the other alone.
  EXPECT_EQ(GetJob(gang).state(), v1::JOB_STATE_PENDING);
  EXPECT_NE(GetJob(gang).message().find("waiting for 2 CPU devices (1 free)"), std::string::npos)
      << GetJob(gang).message();
  EXPECT_TRUE(w2->Assignments().empty());
  Started("w1", small, 1);
  Finished("w1", small, 1, v1::TASK_OUTCOME_SUCCEEDED);
  v1::Job job = GetJob(gang);
  EXPECT_EQ(job.state(), v1::JOB_STATE_SCHEDULED);
  ASSERT_EQ(job.placement_size(), 2);
  ASSERT_EQ(w1->Assignments().size(), 2u);
  ASSERT_EQ(w2->Assignments().size(), 1u);
  EXPECT_EQ(w1->Assignments()[1].world_size(), 2u);
  EXPECT_NE(w1->Assignments()[1].rank(), w2->Assignments()[0].rank());
  // Both ranks meet at rank 0's address; each is told its own address to listen on.
  const v1::Assignment a1 = w1->Assignments()[1];
  const v1::Assignment a2 = w2->Assignments()[0];
  const v1::Assignment& rank0 = a1.rank() == 0 ? a1 : a2;
  const v1::Assignment& rank1 = a1.rank() == 1 ? a1 : a2;
  EXPECT_EQ(rank0.rendezvous_address(), rank1.rendezvous_address());
  EXPECT_EQ(rank0.rendezvous_address().rfind(rank0.advertise_address() + ":294", 0), 0u)
      << rank0.rendezvous_address() << " vs " << rank0.advertise_address();
  EXPECT_NE(rank0.advertise_address(), rank1.advertise_address());
  EXPECT_EQ(job.rendezvous_address(), rank0.rendezvous_address());
  // RUNNING only once every rank has started.
  Started("w1", gang, 1);
  EXPECT_EQ(GetJob(gang).state(), v1::JOB_STATE_SCHEDULED);
  Started("w2", gang, 1);
  EXPECT_EQ(GetJob(gang).state(), v1::JOB_STATE_RUNNING);
}

// Two jobs wait behind a gang that holds the CPUs (it has waited past the backfill
// window); cancelling it frees two workers, and one scheduling pass places both jobs.
class OnePassPlacesTwoJobsTest : public CoordinatorTest {
 protected:
  void SetUp() override {
    CoordinatorTest::SetUp();
    w1_ = Attach("w1");
    w2_ = Attach("w2");
    w3_ = Attach("w3");
    busy_ = Submit(1);
    gang_ = Submit(3);
    clock_.Advance(absl::Minutes(3));
    first_ = Submit(1);
    second_ = Submit(1);
    ASSERT_EQ(GetJob(first_).state(), v1::JOB_STATE_PENDING);
    ASSERT_EQ(GetJob(second_).state(), v1::JOB_STATE_PENDING);
  }

  // The jobs each of the freed workers was assigned.
  std::set<std::string> Assigned() {
    std::set<std::string> jobs;
    for (const auto& w : {w2_, w3_}) {
      for (const auto& a : w->Assignments()) jobs.insert(a.job_id());
    }
    return jobs;
  }

  std::shared_ptr<RecordingConnection> w1_, w2_, w3_;
  std::string busy_, gang_, first_, second_;
};

TEST_F(OnePassPlacesTwoJobsTest, InOneTransaction) {
  const int before = store_->transactions;
  ASSERT_TRUE(core_->CancelJob(gang_, "").ok());
  EXPECT_EQ(GetJob(first_).state(), v1::JOB_STATE_SCHEDULED);
  EXPECT_EQ(GetJob(second_).state(), v1::JOB_STATE_SCHEDULED);
  EXPECT_EQ(Assigned(), (std::set<std::string>{first_, second_}));
  EXPECT_EQ(store_->transactions - before, 2) << "the cancel, then both placements together";
  // Each placement is stored, with its own SCHEDULED event, after the job's earlier ones.
  for (const auto& id : {first_, second_}) {
    auto stored = store_->ReadEvents(id, 1, 100);
    ASSERT_TRUE(stored.ok());
    ASSERT_EQ(stored->size(), 2u);
    EXPECT_EQ((*stored)[1].state_change().state(), v1::JOB_STATE_SCHEDULED);
    EXPECT_EQ((*stored)[1].seq(), 2u);
    EXPECT_EQ(store_->GetJob(id)->placement_size(), 1);
  }
}

TEST_F(OnePassPlacesTwoJobsTest, NoneIsAssignedWhenTheirTransactionFails) {
  store_->full_for_batches = true;
  ASSERT_TRUE(core_->CancelJob(gang_, "").ok());  // stored on its own
  EXPECT_EQ(GetJob(first_).state(), v1::JOB_STATE_PENDING);
  EXPECT_EQ(GetJob(second_).state(), v1::JOB_STATE_PENDING);
  EXPECT_TRUE(Assigned().empty()) << "a worker heard of a placement the store does not hold";
  EXPECT_EQ(store_->GetJob(first_)->state(), v1::JOB_STATE_PENDING);
  store_->full_for_batches = false;
  const std::string third = Submit(1);  // the next pass places both; no worker is left for it
  EXPECT_EQ(GetJob(third).state(), v1::JOB_STATE_PENDING);
  EXPECT_EQ(GetJob(first_).state(), v1::JOB_STATE_SCHEDULED);
  EXPECT_EQ(GetJob(second_).state(), v1::JOB_STATE_SCHEDULED);
  EXPECT_EQ(Assigned(), (std::set<std::string>{first_, second_}));
  EXPECT_EQ(GetJob(first_).attempt(), 1u);
}

TEST_F(CoordinatorTest, FailedRankStopsTheWholeGangAndTheNextAttemptMeetsElsewhere) {
  auto w1 = Attach("w1");
  auto w2 = Attach("w2");
  std::string gang = Submit(2, /*max_restarts=*/2);
  ASSERT_EQ(w1->Assignments().size(), 1u);
  ASSERT_EQ(w2->Assignments().size(), 1u);
  const std::string first_rendezvous = GetJob(gang).rendezvous_address();
  Started("w1", gang, 1);
  Started("w2", gang, 1);
  Finished("w2", gang, 1, v1::TASK_OUTCOME_FAILED);
  // The surviving rank is told to stop, and its device stays taken until it has.
  ASSERT_EQ(w1->Cancels().size(), 1u);
  EXPECT_EQ(w1->Cancels()[0].attempt(), 1u);
  EXPECT_EQ(GetJob(gang).state(), v1::JOB_STATE_RESTARTING);
  EXPECT_EQ(GetJob(gang).restarts(), 1u);
  EXPECT_EQ(w2->Assignments().size(), 1u);
  Finished("w1", gang, 1, v1::TASK_OUTCOME_CANCELLED);
  // Both devices are free: attempt 2 starts on both, with a fresh rendezvous port (the
  // old one may still be in TIME_WAIT on rank 0's host).
  ASSERT_EQ(w1->Assignments().size(), 2u);
  ASSERT_EQ(w2->Assignments().size(), 2u);
  EXPECT_EQ(w1->Assignments()[1].attempt(), 2u);
  EXPECT_NE(GetJob(gang).rendezvous_address(), first_rendezvous);
  EXPECT_EQ(GetJob(gang).restarts(), 1u);
}

TEST_F(CoordinatorTest, ACoordinatorThatStoodStillGivesItsWorkersGraceBeforeJudgingThem) {
  stall_threshold_ = absl::Seconds(3);
  Open();
  auto w1 = Attach("w1");
  std::string id = Submit();
  Started("w1", id, 1);
  // The coordinator stands still for 20 s (SIGSTOP, a paused VM), twice the heartbeat
  // timeout, and ticks again.
  core_->Tick();
  clock_.Advance(absl::Seconds(20));
  core_->Tick();
  EXPECT_EQ(GetJob(id).state(), v1::JOB_STATE_RUNNING) << "the worker was blamed for the stall";
  EXPECT_EQ(GetJob(id).restarts(), 0u);
  // From the wake, the worker has the whole timeout: a heartbeat keeps it alive...
  for (int s = 0; s < 9; ++s) {
    clock_.Advance(absl::Seconds(1));
    core_->Tick();
  }
  v1::WorkerMessage beat;
  beat.mutable_heartbeat();
  core_->HandleWorkerMessage("w1", beat);
  for (int s = 0; s < 9; ++s) {
    clock_.Advance(absl::Seconds(1));
    core_->Tick();
  }
  EXPECT_EQ(GetJob(id).state(), v1::JOB_STATE_RUNNING);
  // ...and real silence, ticked through, is still judged.
  for (int s = 0; s < 3; ++s) {
    clock_.Advance(absl::Seconds(1));
    core_->Tick();
  }
  EXPECT_EQ(GetJob(id).state(), v1::JOB_STATE_RESTARTING);
  EXPECT_EQ(w1->closed_because, "no heartbeat");
}

TEST_F(CoordinatorTest, SilentWorkerIsPresumedDeadAndItsJobRequeued) {
  auto w1 = Attach("w1");
  std::string id = Submit();
  Started("w1", id, 1);
  clock_.Advance(absl::Seconds(5));
  core_->Tick();
  EXPECT_EQ(GetJob(id).state(), v1::JOB_STATE_RUNNING);  // not yet past the timeout
  clock_.Advance(absl::Seconds(6));
  core_->Tick();
  v1::Job job = GetJob(id);
  EXPECT_EQ(job.state(), v1::JOB_STATE_RESTARTING);
  EXPECT_EQ(job.restarts(), 1u);
  EXPECT_NE(job.message().find("stopped sending heartbeats"), std::string::npos) << job.message();
  EXPECT_EQ(w1->closed_because, "no heartbeat");
  EXPECT_TRUE(core_->GetCluster().workers().empty());
  auto w2 = Attach("w2");
  ASSERT_EQ(w2->Assignments().size(), 1u);
  EXPECT_EQ(w2->Assignments()[0].attempt(), 2u);
}

TEST_F(CoordinatorTest, AWorkerThatNeverStartsItsJobIsEvictedAndTheJobRequeued) {
  start_timeout_ = absl::Seconds(60);
  Open();
  auto w1 = Attach("w1");
  std::string id = Submit();
  ASSERT_EQ(w1->Assignments().size(), 1u);
  auto beat_and_tick = [&] {
    clock_.Advance(absl::Seconds(4));
    v1::WorkerMessage beat;
    beat.mutable_heartbeat();
    Send("w1", beat);
    core_->Tick();
  };
  for (int i = 0; i < 14; ++i) beat_and_tick();  // 56 s: alive, but never started
  EXPECT_EQ(GetJob(id).state(), v1::JOB_STATE_SCHEDULED);
  beat_and_tick();  // 60 s
  v1::Job job = GetJob(id);
  EXPECT_EQ(job.state(), v1::JOB_STATE_PENDING);
  EXPECT_EQ(job.restarts(), 0u) << "not the job's fault";
  EXPECT_NE(job.message().find("worker w1 did not start it within 1m"), std::string::npos)
      << job.message();
  EXPECT_NE(w1->closed_because.find("did not start job " + id), std::string::npos)
      << w1->closed_because;
  EXPECT_TRUE(core_->GetCluster().workers().empty());
  auto w2 = Attach("w2");
  ASSERT_EQ(w2->Assignments().size(), 1u);
  EXPECT_EQ(w2->Assignments()[0].attempt(), 2u);
  Started("w2", id, 2);
  for (int i = 0; i < 30; ++i) {  // a started job has no deadline
    clock_.Advance(absl::Seconds(4));
    v1::WorkerMessage beat;
    beat.mutable_heartbeat();
    Send("w2", beat);
    core_->Tick();
  }
  EXPECT_EQ(GetJob(id).state(), v1::JOB_STATE_RUNNING);
}

TEST_F(CoordinatorTest, HeartbeatsKeepAWorkerAlive) {
  Attach("w1");
  for (int i = 0; i < 10; ++i) {
    clock_.Advance(absl::Seconds(4));
    v1::WorkerMessage beat;
    beat.mutable_heartbeat();
    Send("w1", beat);
    core_->Tick();
  }
  EXPECT_EQ(core_->GetCluster().workers_size(), 1);
}

TEST_F(CoordinatorTest, FailuresUseUpRestartsThenFailTheJob) {
  auto w = Attach("w1");
  std::string id = Submit(1, /*max_restarts=*/1);
  Started("w1", id, 1);
  Finished("w1", id, 1, v1::TASK_OUTCOME_FAILED);
  EXPECT_EQ(GetJob(id).restarts(), 1u);
  // Re-queued and, the worker being free again, started at once as attempt 2.
  EXPECT_EQ(GetJob(id).state(), v1::JOB_STATE_SCHEDULED);
  EXPECT_EQ(GetJob(id).attempt(), 2u);
  Started("w1", id, 2);
  Finished("w1", id, 2, v1::TASK_OUTCOME_FAILED);
  v1::Job job = GetJob(id);
  EXPECT_EQ(job.state(), v1::JOB_STATE_FAILED);
  EXPECT_NE(job.message().find("no restarts left"), std::string::npos) << job.message();
}

TEST_F(CoordinatorTest, NonRetryableFailureFailsAtOnce) {
  Attach("w1");
  std::string id = Submit(1, /*max_restarts=*/5);
  Started("w1", id, 1);
  Finished("w1", id, 1, v1::TASK_OUTCOME_FAILED, /*retryable=*/false);
  EXPECT_EQ(GetJob(id).state(), v1::JOB_STATE_FAILED);
  EXPECT_EQ(GetJob(id).restarts(), 0u);
}

TEST_F(CoordinatorTest, CancelStopsTheWorkerAndFreesItOnceItConfirms) {
  auto w = Attach("w1");
  std::string id = Submit();
  Started("w1", id, 1);
  auto cancelled = core_->CancelJob(id, "not needed");
  ASSERT_TRUE(cancelled.ok());
  EXPECT_EQ(cancelled->state(), v1::JOB_STATE_CANCELLED);
  ASSERT_EQ(w->Cancels().size(), 1u);
  EXPECT_EQ(WorkerState("w1"), v1::WORKER_STATE_DRAINING);
  std::string next = Submit();
  EXPECT_EQ(GetJob(next).state(), v1::JOB_STATE_PENDING);  // the device is not free yet
  Finished("w1", id, 1, v1::TASK_OUTCOME_CANCELLED);
  EXPECT_EQ(GetJob(id).state(), v1::JOB_STATE_CANCELLED);
  EXPECT_EQ(GetJob(next).state(), v1::JOB_STATE_SCHEDULED);
}

TEST_F(CoordinatorTest, CancellingAFinishedJobIsRefused) {
  Attach("w1");
  std::string id = Submit();
  Finished("w1", id, 1, v1::TASK_OUTCOME_SUCCEEDED);
  auto again = core_->CancelJob(id, "");
  EXPECT_EQ(again.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(core_->CancelJob("12345", "").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(CoordinatorTest, MessagesOfAnAbandonedAttemptAreIgnored) {
  Attach("w1");
  std::string id = Submit();
  Started("w1", id, 1);
  Finished("w1", id, 1, v1::TASK_OUTCOME_FAILED);  // -> attempt 2 on w1
  ASSERT_EQ(GetJob(id).attempt(), 2u);
  Finished("w1", id, 1, v1::TASK_OUTCOME_SUCCEEDED);  // late news of attempt 1
  EXPECT_EQ(GetJob(id).state(), v1::JOB_STATE_SCHEDULED);
}

// One worker credential on every host (a shared join token) must not let a second
// process knock a training worker off its job: its id stays its live connection's.
TEST_F(CoordinatorTest, ASecondRegistrationOfAWorkerThatIsHeardFromIsRefused) {
  auto holder = Attach("w1");
  std::string id = Submit();
  Started("w1", id, 1);
  clock_.Advance(absl::Seconds(3));
  v1::WorkerMessage heartbeat;
  heartbeat.mutable_heartbeat();
  Send("w1", heartbeat);
  clock_.Advance(absl::Seconds(1));
  auto intruder = std::make_shared<RecordingConnection>();
  v1::RegisterWorker reg;
  reg.set_worker_id("w1");
  reg.set_host("elsewhere");
  reg.mutable_device()->set_type(v1::DEVICE_TYPE_CPU);
  const absl::Status refused = core_->AttachWorker(reg, "10.9.9.9", intruder);
  EXPECT_EQ(refused.code(), absl::StatusCode::kAlreadyExists) << refused;
  EXPECT_NE(refused.message().find("w1 is attached and was heard from 1s ago"), std::string::npos)
      << refused;
  EXPECT_TRUE(holder->closed_because.empty());
  v1::Job job = GetJob(id);
  EXPECT_EQ(job.state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(job.restarts(), 0u);
  EXPECT_EQ(job.attempt(), 1u);
}

TEST_F(CoordinatorTest, ASilentWorkersIdIsTakenOverAndItsJobRequeuedWithoutARestart) {
  auto old_connection = Attach("w1");
  std::string id = Submit();
  Started("w1", id, 1);
  clock_.Advance(absl::Seconds(7));  // more than three heartbeats of silence
  auto new_connection = Attach("w1");
  EXPECT_FALSE(old_connection->closed_because.empty());
  // The job went back to the queue and, the (new) worker being idle, started again; the
  // replaced process is no fault of the job.
  ASSERT_EQ(new_connection->Assignments().size(), 1u);
  EXPECT_EQ(new_connection->Assignments()[0].attempt(), 2u);
  EXPECT_EQ(GetJob(id).restarts(), 0u);
  // The old stream closing later must not remove the new registration.
  core_->DetachWorker("w1", old_connection.get(), "old stream closed");
  EXPECT_EQ(core_->GetCluster().workers_size(), 1);
}

// A worker shut down with a grace (stoke-worker on SIGTERM) has its job preempted: the
// rank stops at a step boundary with a checkpoint of that step, the job waits as
// PREEMPTED without spending a restart, and it resumes on another worker, never on the
// one leaving.
TEST_F(CoordinatorTest, ALeavingWorkersJobStopsAtAStepBoundaryAndResumesElsewhere) {
  auto w1 = Attach("w1");
  const std::string id = Submit();
  Started("w1", id, 1);
  Leave("w1", "maintenance", /*stop_grace_ms=*/20'000);
  ASSERT_EQ(w1->Preempts().size(), 1u);
  EXPECT_EQ(w1->Preempts()[0].job_id(), id);
  EXPECT_EQ(w1->Preempts()[0].attempt(), 1u);
  EXPECT_EQ(w1->Preempts()[0].after_step(), 0u) << "one rank stops after the step under way";
  EXPECT_NE(w1->Preempts()[0].reason().find("w1 is shutting down (maintenance)"),
            std::string::npos);
  EXPECT_EQ(GetJob(id).state(), v1::JOB_STATE_RUNNING) << "it trains on to a step boundary";

  Finished("w1", id, 1, v1::TASK_OUTCOME_PREEMPTED);
  v1::Job stopped = GetJob(id);
  EXPECT_EQ(stopped.state(), v1::JOB_STATE_PREEMPTED);
  EXPECT_EQ(stopped.restarts(), 0u);
  EXPECT_EQ(stopped.preemptions(), 1u);
  EXPECT_NE(stopped.message().find("preempted because worker w1 shut down"), std::string::npos)
      << stopped.message();
  EXPECT_EQ(w1->Assignments().size(), 1u) << "nothing new for a worker that is leaving";
  EXPECT_EQ(WorkerState("w1"), v1::WORKER_STATE_IDLE);

  auto w2 = Attach("w2");
  ASSERT_EQ(w2->Assignments().size(), 1u);
  EXPECT_EQ(w2->Assignments()[0].job_id(), id);
  EXPECT_EQ(w2->Assignments()[0].attempt(), 2u);
  EXPECT_EQ(GetJob(id).restarts(), 0u);
}

// One rank's worker leaving stops the whole gang after one step chosen ahead of every
// rank; the other rank's device is free again once it has stopped, the leaving one's not.
TEST_F(CoordinatorTest, ALeavingWorkersGangStopsEveryRankAfterTheSameStep) {
  auto w1 = Attach("w1");
  auto w2 = Attach("w2");
  const std::string gang = Submit(2);
  Started("w1", gang, 1);
  Started("w2", gang, 1);
  Leave("w2", "node drained", /*stop_grace_ms=*/20'000);
  ASSERT_EQ(w1->Preempts().size(), 1u);
  ASSERT_EQ(w2->Preempts().size(), 1u);
  EXPECT_GT(w1->Preempts()[0].after_step(), 0u) << "ranks of a gang stop after one agreed step";
  EXPECT_EQ(w1->Preempts()[0].after_step(), w2->Preempts()[0].after_step());

  Finished("w1", gang, 1, v1::TASK_OUTCOME_PREEMPTED);
  EXPECT_EQ(GetJob(gang).state(), v1::JOB_STATE_RUNNING) << "until every rank has stopped";
  Finished("w2", gang, 1, v1::TASK_OUTCOME_PREEMPTED);
  EXPECT_EQ(GetJob(gang).state(), v1::JOB_STATE_PREEMPTED);
  EXPECT_EQ(GetJob(gang).restarts(), 0u);
  // One device is left, the leaving worker's is not counted: the gang of two waits.
  const std::string single = Submit(1);
  ASSERT_EQ(w1->Assignments().size(), 2u);
  EXPECT_EQ(w1->Assignments()[1].job_id(), single);
  EXPECT_EQ(w2->Assignments().size(), 1u);
  EXPECT_EQ(GetJob(gang).state(), v1::JOB_STATE_PREEMPTED) << GetJob(gang).message();
}

// A worker leaving with a grace while idle, or holding no live attempt, leaves at once.
TEST_F(CoordinatorTest, AnIdleWorkerLeavingWithAGraceLeavesAtOnce) {
  auto w1 = Attach("w1");
  Leave("w1", "maintenance", /*stop_grace_ms=*/20'000);
  EXPECT_EQ(core_->GetCluster().workers_size(), 0);
  EXPECT_TRUE(w1->Preempts().empty());
}

TEST_F(CoordinatorTest, LeavingWorkerGetsNoMoreWorkAndItsJobIsRequeuedWithoutARestart) {
  auto w1 = Attach("w1");
  std::string id = Submit();
  Started("w1", id, 1);
  Leave("w1", "maintenance");
  v1::Job job = GetJob(id);
  EXPECT_EQ(job.state(), v1::JOB_STATE_PENDING);
  EXPECT_EQ(job.restarts(), 0u);
  EXPECT_NE(job.message().find("w1 is shutting down (maintenance)"), std::string::npos)
      << job.message();
  EXPECT_EQ(w1->Assignments().size(), 1u) << "nothing new for a worker that is leaving";
  // Its late report of the stopped task changes nothing.
  Finished("w1", id, 1, v1::TASK_OUTCOME_CANCELLED);
  EXPECT_EQ(GetJob(id).state(), v1::JOB_STATE_PENDING);
  auto w2 = Attach("w2");
  ASSERT_EQ(w2->Assignments().size(), 1u);
  EXPECT_EQ(w2->Assignments()[0].attempt(), 2u);
}

TEST_F(CoordinatorTest, AWorkerWhoseLinkBrokeCarriesOnItsJobWhenItReconnectsHoldingIt) {
  auto w1 = Attach("w1");
  const std::string id = Submit();
  Started("w1", id, 1);
  // The stream breaks (a network blip, a coordinator that stood still past the worker's
  // keepalive); the worker trains on and reconnects 3 s later.
  core_->DetachWorker("w1", w1.get(), "link closed");
  EXPECT_EQ(GetJob(id).state(), v1::JOB_STATE_RUNNING);
  clock_.Advance(absl::Seconds(3));
  core_->Tick();
  auto again = Reattach("w1", id, 1);
  EXPECT_TRUE(again->Cancels().empty());
  for (int i = 0; i < 5; ++i) {  // 20 s, twice the heartbeat timeout
    clock_.Advance(absl::Seconds(4));
    v1::WorkerMessage beat;
    beat.mutable_heartbeat();
    Send("w1", beat);
    core_->Tick();
  }
  const v1::Job job = GetJob(id);
  EXPECT_EQ(job.state(), v1::JOB_STATE_RUNNING) << job.message();
  EXPECT_EQ(job.attempt(), 1u);
  EXPECT_EQ(job.restarts(), 0u);
  EXPECT_TRUE(again->Cancels().empty());
}

TEST_F(CoordinatorTest, AWorkerWhoseLinkBrokeAndDidNotComeBackFailsItsAttemptAfterTheTimeout) {
  auto w1 = Attach("w1");
  const std::string id = Submit();
  Started("w1", id, 1);
  core_->DetachWorker("w1", w1.get(), "link closed");
  clock_.Advance(absl::Seconds(9));
  core_->Tick();
  EXPECT_EQ(GetJob(id).state(), v1::JOB_STATE_RUNNING) << "given up before the timeout";
  clock_.Advance(absl::Seconds(1));
  core_->Tick();
  v1::Job job = GetJob(id);
  EXPECT_EQ(job.state(), v1::JOB_STATE_RESTARTING);
  EXPECT_EQ(job.restarts(), 1u) << "a worker lost is a failure of the attempt";
  EXPECT_NE(job.message().find("its link broke and worker w1 did not come back within 10s"),
            std::string::npos)
      << job.message();
}

TEST_F(CoordinatorTest, AWorkerBackWithoutItsTaskWaitsOutTheWindowAndNonsenseFailsAtOnce) {
  // No restarts allowed: the failure's cause stays the job's message.
  auto w1 = Attach("w1");
  const std::string id = Submit(1, /*max_restarts=*/0);
  Started("w1", id, 1);
  core_->DetachWorker("w1", w1.get(), "link closed");
  // Its process restarted and holds nothing: the id is the task's until the window ends
  // (it could as well be another process with the same join token).
  const absl::Status early = TryAttach("w1", {});
  EXPECT_TRUE(absl::IsAlreadyExists(early)) << early;
  clock_.Advance(absl::Seconds(10));
  core_->Tick();
  auto restarted = Attach("w1");
  v1::Job job = GetJob(id);
  EXPECT_EQ(job.state(), v1::JOB_STATE_FAILED);
  EXPECT_NE(job.message().find("its link broke and worker w1 did not come back within 10s"),
            std::string::npos)
      << job.message();

  const std::string second = Submit(1, /*max_restarts=*/0);
  ASSERT_EQ(restarted->Assignments().size(), 1u);
  Started("w1", second, 1);
  core_->DetachWorker("w1", restarted.get(), "bad message", /*may_reconnect=*/false);
  job = GetJob(second);
  EXPECT_EQ(job.state(), v1::JOB_STATE_FAILED);
  EXPECT_NE(job.message().find("worker w1 was lost (bad message)"), std::string::npos)
      << job.message();
}

// A coordinator restarts while w1 runs a job: the new one finds the job running and waits
// for its worker, which trained on meanwhile, to reattach holding it.
class CoordinatorRestartTest : public CoordinatorTest {
 protected:
  void RestartWhileRunning() {
    w1_ = Attach("w1");
    running_ = Submit();
    queued_ = Submit();
    Started("w1", running_, 1);
    // A coordinator shutting down loses its workers; that is no fault of the job.
    core_->BeginShutdown();
    core_->DetachWorker("w1", w1_.get(), "coordinator stopping");
    Open();  // a new coordinator on the same store
  }

  std::shared_ptr<RecordingConnection> w1_;
  std::string running_, queued_;
};

TEST_F(CoordinatorRestartTest, RunningJobCarriesOnWhenItsWorkerReattachesHoldingIt) {
  RestartWhileRunning();
  EXPECT_EQ(GetJob(running_).state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(GetJob(queued_).state(), v1::JOB_STATE_PENDING);
  auto w1 = Reattach("w1", running_, 1);
  EXPECT_TRUE(w1->Assignments().empty()) << "the job was started again";
  EXPECT_TRUE(w1->Cancels().empty());
  EXPECT_EQ(WorkerState("w1"), v1::WORKER_STATE_BUSY);
  // Past the deadline the worker has kept up its heartbeats: nothing changes.
  clock_.Advance(absl::Seconds(6));
  core_->HandleWorkerMessage("w1", [] {
    v1::WorkerMessage m;
    m.mutable_heartbeat();
    return m;
  }());
  clock_.Advance(absl::Seconds(6));
  core_->Tick();
  // Metrics go on from the step reached; the outcome is the attempt's.
  v1::WorkerMessage report;
  report.mutable_report()->set_job_id(running_);
  report.mutable_report()->set_attempt(1);
  report.mutable_report()->add_metrics()->set_step(500);
  report.mutable_report()->set_dropped_samples(3);
  report.mutable_report()->set_report_seq(7);
  Send("w1", report);
  Send("w1", report);  // sent again after another reattachment: applied once
  EXPECT_EQ(GetJob(running_).latest_metrics().step(), 500u);
  Finished("w1", running_, 1, v1::TASK_OUTCOME_SUCCEEDED);
  v1::Job job = GetJob(running_);
  EXPECT_EQ(job.state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(job.attempt(), 1u);
  EXPECT_EQ(job.restarts(), 0u);
  // The samples the worker could not keep are said in the job's log.
  bool told = false;
  auto events = store_->ReadEvents(running_, 1, 100);
  ASSERT_TRUE(events.ok()) << events.status();
  int samples = 0;
  for (const auto& e : *events) {
    told |= e.has_log() && e.log().text().find("dropped 3 metric samples") != std::string::npos;
    samples += e.has_metrics();
  }
  EXPECT_TRUE(told);
  EXPECT_EQ(samples, 1);
}

TEST_F(CoordinatorRestartTest, JobWhoseWorkerDoesNotReattachIsRequeuedAfterTheHeartbeatTimeout) {
  RestartWhileRunning();
  clock_.Advance(absl::Seconds(9));
  core_->Tick();
  EXPECT_EQ(GetJob(running_).state(), v1::JOB_STATE_RUNNING);
  clock_.Advance(absl::Seconds(2));
  core_->Tick();
  v1::Job job = GetJob(running_);
  EXPECT_EQ(job.state(), v1::JOB_STATE_PENDING);
  EXPECT_EQ(job.restarts(), 0u);
  EXPECT_NE(job.message().find("coordinator restarted"), std::string::npos) << job.message();
  EXPECT_NE(job.message().find("w1 did not come back"), std::string::npos) << job.message();
  // The worker, back late, is told to stop the stale attempt; the job runs anew once the
  // worker is free.
  auto w1 = Reattach("w1", running_, 1);
  ASSERT_EQ(w1->Cancels().size(), 1u);
  EXPECT_EQ(w1->Cancels()[0].attempt(), 1u);
  EXPECT_TRUE(w1->Assignments().empty());
  Finished("w1", running_, 1, v1::TASK_OUTCOME_CANCELLED);
  ASSERT_FALSE(w1->Assignments().empty());
  EXPECT_EQ(w1->Assignments()[0].job_id(), running_);
  EXPECT_EQ(w1->Assignments()[0].attempt(), 2u);
}

// After a restart, anyone holding a worker credential could register a training worker's
// id before it comes back, and take its job. Until the window ends, only the process that
// holds the task and its key gets the id.
TEST_F(CoordinatorRestartTest, AnAwaitedIdGoesOnlyToTheProcessHoldingItsTaskAndKey) {
  RestartWhileRunning();
  const absl::Status bare = TryAttach("w1", {});
  EXPECT_TRUE(absl::IsAlreadyExists(bare)) << bare;
  EXPECT_NE(bare.message().find("w1 runs rank 0 of job " + running_), std::string::npos) << bare;
  v1::HeldTask forged;
  forged.set_job_id(running_);
  forged.set_attempt(1);
  forged.set_started(true);
  forged.set_task_key("stk_guessed");
  EXPECT_TRUE(absl::IsAlreadyExists(TryAttach("w1", forged)));
  EXPECT_EQ(GetJob(running_).state(), v1::JOB_STATE_RUNNING);
  auto w1 = Reattach("w1", running_, 1);
  EXPECT_TRUE(w1->Assignments().empty()) << "the job was started again";
  EXPECT_EQ(WorkerState("w1"), v1::WORKER_STATE_BUSY);
  EXPECT_EQ(GetJob(running_).restarts(), 0u);
}

TEST_F(CoordinatorRestartTest, WorkerBackWithoutItsJobAfterTheWindowRequeuesItWithoutARestart) {
  RestartWhileRunning();
  clock_.Advance(absl::Seconds(11));
  core_->Tick();
  auto w1 = Attach("w1");  // a new process: the old one, and its training, are gone
  v1::Job job = GetJob(running_);
  EXPECT_EQ(job.restarts(), 0u);
  ASSERT_FALSE(w1->Assignments().empty());
  EXPECT_EQ(w1->Assignments()[0].job_id(), running_);
  EXPECT_EQ(w1->Assignments()[0].attempt(), 2u);
}

// A process that takes assignments and vanishes before starting them (four fake ids
// could once use up any job's restarts) costs the job no restart.
TEST_F(CoordinatorTest, AWorkerLostBeforeItsTaskStartedCostsTheJobNoRestart) {
  const std::string id = Submit(1, /*max_restarts=*/0);
  for (const char* fake : {"f1", "f2", "f3", "f4", "f5"}) {
    auto connection = Attach(fake);
    ASSERT_EQ(connection->Assignments().size(), 1u) << fake;
    core_->DetachWorker(fake, connection.get(), "gone", /*may_reconnect=*/false);
    EXPECT_EQ(GetJob(id).state(), v1::JOB_STATE_PENDING) << fake << ": " << GetJob(id).message();
  }
  const v1::Job job = GetJob(id);
  EXPECT_EQ(job.restarts(), 0u);
  EXPECT_NE(job.message().find("before the attempt started"), std::string::npos) << job.message();
  auto real = Attach("w1");
  Started("w1", id, 6);
  EXPECT_EQ(GetJob(id).state(), v1::JOB_STATE_RUNNING);
}

TEST_F(CoordinatorTest, ReportsBecomeOrderedEvents) {
  Attach("w1");
  std::string id = Submit();
  Started("w1", id, 1);
  v1::WorkerMessage m;
  m.mutable_report()->set_job_id(id);
  m.mutable_report()->set_attempt(1);
  for (int step = 10; step <= 30; step += 10) m.mutable_report()->add_metrics()->set_step(step);
  m.mutable_report()->add_logs()->set_text("hello");
  Send("w1", m);
  core_->FlushTelemetry();  // written and published by a thread of its own
  auto read = *hub_->Read(id, 1, 100);
  std::vector<uint64_t> steps;
  for (size_t i = 0; i < read.events.size(); ++i) {
    EXPECT_EQ(read.events[i].seq(), i + 1);
    if (read.events[i].has_metrics()) steps.push_back(read.events[i].metrics().step());
  }
  EXPECT_EQ(steps, (std::vector<uint64_t>{10, 20, 30}));
  EXPECT_EQ(read.events.back().log().text(), "hello");
  EXPECT_EQ(GetJob(id).latest_metrics().step(), 30u);
}

// One rank of a pair computes 30% longer for 5 windows: the job names it (GetJob, its log,
// the straggler diagnosis on every rank's samples) and forgets it when the job ends.
TEST_F(CoordinatorTest, ARankSlowerThanItsPeerFor5WindowsIsNamedAndForgottenAtTheEnd) {
  Attach("w1");
  Attach("w2");
  const std::string id = Submit(2);
  Started("w1", id, 1);
  Started("w2", id, 1);
  v1::Job job = GetJob(id);
  ASSERT_EQ(job.state(), v1::JOB_STATE_RUNNING);
  const std::string slow_worker = job.placement(1).worker_id();  // rank 1
  const std::string peer_worker = job.placement(0).worker_id();
  ASSERT_EQ(job.placement(1).rank(), 1u);
  auto report = [&](const std::string& worker, uint64_t step, double comm_wait_ratio) {
    v1::WorkerMessage m;
    m.mutable_report()->set_job_id(id);
    m.mutable_report()->set_attempt(1);
    auto* sample = m.mutable_report()->add_metrics();
    sample->set_step(step);
    sample->set_step_seconds(0.13);
    sample->set_comm_wait_ratio(comm_wait_ratio);
    Send(worker, m);
  };
  for (uint64_t step = 10; step <= 40; step += 10) {
    report(peer_worker, step, 0.3 / 1.3);  // 0.10 s of compute, then waits for rank 1
    report(slow_worker, step, 0);          // 0.13 s of compute
  }
  EXPECT_EQ(GetJob(id).stragglers_size(), 0) << "4 windows are not enough";
  report(peer_worker, 50, 0.3 / 1.3);
  report(slow_worker, 50, 0);
  job = GetJob(id);
  ASSERT_EQ(job.stragglers_size(), 1);
  EXPECT_EQ(job.stragglers(0).rank(), 1u);
  EXPECT_EQ(job.stragglers(0).worker_id(), slow_worker);
  EXPECT_EQ(job.stragglers(0).host(), "host");
  EXPECT_EQ(job.stragglers(0).cause(), v1::STRAGGLER_CAUSE_COMPUTE);
  EXPECT_EQ(core_->ActiveJobs().at(0).stragglers_size(), 1) << "what /metrics reads";
  report(peer_worker, 60, 0.3 / 1.3);  // rank 0's latest sample is the job's
  EXPECT_EQ(GetJob(id).latest_metrics().diagnoses(0), v1::DIAGNOSIS_STRAGGLER);

  core_->FlushTelemetry();
  int said = 0;
  const auto events = hub_->Read(id, 1, 1000);
  ASSERT_TRUE(events.ok()) << events.status();
  for (const auto& e : events->events) {
    if (e.has_log() && e.log().text() == job.stragglers(0).summary()) ++said;
  }
  EXPECT_EQ(said, 1) << job.stragglers(0).summary();
  EXPECT_EQ(job.stragglers(0).summary(),
            "rank 1 (worker " + slow_worker + " on host, cpu:0) is a straggler: its compute " +
                "takes 30% longer than its peers' (5 windows); the others wait for it in " +
                "all-reduce");

  Finished("w1", id, 1, v1::TASK_OUTCOME_SUCCEEDED);
  Finished("w2", id, 1, v1::TASK_OUTCOME_SUCCEEDED);
  EXPECT_EQ(GetJob(id).state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(GetJob(id).stragglers_size(), 0);
}

// A process without a GPU that claims one is found out by its first metrics: a CUDA rank's
// samples always carry the caching allocator's readings. It is closed and may not claim a
// GPU again for an hour; the job goes back to the queue with no restart counted, so that
// a fake cannot use up a job's restarts by capturing it again and again.
TEST_F(CoordinatorTest, AWorkerWhoseMetricsShowNoGpuLosesTheJobAndIsClosed) {
  auto liar = std::make_shared<RecordingConnection>();
  v1::RegisterWorker reg;
  reg.set_worker_id("fake-gpu");
  reg.mutable_device()->set_type(v1::DEVICE_TYPE_CUDA);
  ASSERT_TRUE(core_->AttachWorker(reg, "10.0.0.9", liar).ok());
  std::string id = Submit();
  ASSERT_EQ(liar->Assignments().size(), 1u);
  Started("fake-gpu", id, 1);
  v1::WorkerMessage m;
  m.mutable_report()->set_job_id(id);
  m.mutable_report()->set_attempt(1);
  m.mutable_report()->add_metrics()->set_step(10);  // no memory readings
  Send("fake-gpu", m);
  EXPECT_NE(liar->closed_because.find("no CUDA memory readings"), std::string::npos);
  EXPECT_EQ(GetJob(id).state(), v1::JOB_STATE_PENDING);
  EXPECT_EQ(GetJob(id).restarts(), 0u);
  EXPECT_TRUE(hub_->Read(id, 1, 100)->events.back().has_state_change());  // sample not stored

  auto again = std::make_shared<RecordingConnection>();
  const absl::Status refused = core_->AttachWorker(reg, "10.0.0.9", again);
  EXPECT_EQ(refused.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_NE(refused.message().find("claimed a GPU its metrics showed it lacks"), std::string::npos)
      << refused;
  clock_.Advance(absl::Hours(1));  // past its distrust, and silent long enough
  EXPECT_TRUE(core_->AttachWorker(reg, "10.0.0.9", again).ok());
}

TEST_F(CoordinatorTest, AWorkerIdStaysWithTheCredentialThatRegisteredItFirst) {
  v1::RegisterWorker reg;
  reg.set_worker_id("host/cpu:0");
  reg.mutable_device()->set_type(v1::DEVICE_TYPE_CPU);
  auto real = std::make_shared<RecordingConnection>();
  ASSERT_TRUE(core_->AttachWorker(reg, "10.0.0.1", real, "host-a").ok());
  std::string id = Submit();
  Started("host/cpu:0", id, 1);
  auto thief = std::make_shared<RecordingConnection>();
  auto refused = core_->AttachWorker(reg, "10.0.0.2", thief, "host-b");
  EXPECT_EQ(refused.code(), absl::StatusCode::kPermissionDenied);
  // The real worker keeps its job: nothing was evicted, no restart burnt.
  EXPECT_TRUE(real->closed_because.empty());
  EXPECT_EQ(GetJob(id).state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(GetJob(id).restarts(), 0u);
  // The same credential may come back (a restarted worker process), once the job it ran
  // no longer waits for its task (AnAwaitedIdGoesOnlyToTheProcessHoldingItsTaskAndKey).
  Open();
  clock_.Advance(absl::Seconds(11));
  core_->Tick();
  EXPECT_TRUE(
      core_->AttachWorker(reg, "10.0.0.1", std::make_shared<RecordingConnection>(), "host-a").ok());
  EXPECT_EQ(core_->AttachWorker(reg, "10.0.0.2", thief, "host-b").code(),
            absl::StatusCode::kPermissionDenied);
}

TEST_F(CoordinatorTest, ReportsForJobsNotAssignedToTheSenderAreCounted) {
  Attach("w1");
  Attach("w2");
  std::string id = Submit();
  const std::string holder = WorkerState("w1") == v1::WORKER_STATE_BUSY ? "w1" : "w2";
  const std::string other = holder == "w1" ? "w2" : "w1";
  Started(holder, id, 1);
  Finished(other, id, 1, v1::TASK_OUTCOME_SUCCEEDED);  // forged
  EXPECT_EQ(GetJob(id).state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(core_->GetCluster().refused_worker_reports(), 1u);
}

// The real store, whose job commits a test can hold as a slow disk sync would.
class StallableStore final : public testing::ForwardingJobStore {
 public:
  using ForwardingJobStore::ForwardingJobStore;

  absl::Status Commit(const v1::Job& job, absl::Span<const v1::JobEvent> events) override {
    std::unique_lock<std::mutex> lock(mu_);
    if (stall_) {
      ++stalled_;
      cv_.notify_all();
      cv_.wait(lock, [this] { return !stall_; });
    }
    lock.unlock();
    return ForwardingJobStore::Commit(job, events);
  }
  void Stall() {
    std::lock_guard<std::mutex> lock(mu_);
    stall_ = true;
  }
  bool AwaitStalled() {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(10), [this] { return stalled_ > 0; });
  }
  void Release() {
    std::lock_guard<std::mutex> lock(mu_);
    stall_ = false;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool stall_ = false;
  int stalled_ = 0;
};

// A transition holds the coordinator's lock until its commit is durable; GetJob, ListJobs
// and /metrics' snapshot must not wait for that disk sync (under load they queued behind
// every one, bench/load.sh found).
TEST(CoordinatorReads, AnswerWhileATransitionWaitsForTheStore) {
  stoke::testing::TempDir dir;
  StallableStore store(*SqliteJobStore::Open({dir.File("stoke.db")}));
  EventHub hub(store);
  FakeClock clock;
  Coordinator::Options options;
  options.tick_interval = absl::ZeroDuration();
  options.jobs_dir = dir.File("jobs");
  auto core = *Coordinator::Create(options, store, hub, clock);
  ASSERT_TRUE(core->Start().ok());
  v1::JobSpec spec;
  spec.mutable_model()->mutable_mlp();
  spec.mutable_data()->mutable_synthetic();
  spec.mutable_training()->set_steps(10);
  spec::ApplyJobSpecDefaults(spec, *spec::InspectData(spec, spec::DataRoots({})));
  const std::string id = core->SubmitJob(spec)->id();

  store.Stall();
  std::thread cancel([&] { EXPECT_TRUE(core->CancelJob(id, "test").ok()); });
  ASSERT_TRUE(store.AwaitStalled());
  // Every read answers at once, with the job as last committed (still pending).
  auto reads = std::async(std::launch::async, [&] {
    auto job = core->GetJob(id);
    auto page = core->ListJobs({});
    auto active = core->ActiveJobs();
    return job.ok() && job->state() == v1::JOB_STATE_PENDING && page.ok() &&
           page->jobs.size() == 1 && page->jobs[0].state() == v1::JOB_STATE_PENDING &&
           active.size() == 1;
  });
  const bool answered = reads.wait_for(std::chrono::seconds(5)) == std::future_status::ready;
  store.Release();
  cancel.join();
  ASSERT_TRUE(answered) << "a read waited for the stalled commit";
  EXPECT_TRUE(reads.get());
  EXPECT_EQ(core->GetJob(id)->state(), v1::JOB_STATE_CANCELLED);
  EXPECT_TRUE(core->ActiveJobs().empty());
  core->Stop();
}

}  // namespace
}  // namespace stoke::server
