// One coordinator (in process: real gRPC on loopback, SQLite in a temp folder) under 500
// simulated workers that attach and detach all at once, round after round, while 50 jobs
// are submitted and half of them cancelled over the public API. The coordinator must stay
// up, lose no state change (every job's stored events run 1, 2, 3, ... and end in the
// state stored and held in memory; every acknowledged cancel holds), and leave no job
// held by a worker that is gone. A second test puts the core alone under the same churn
// from many threads, for ThreadSanitizer (scripts/test-sanitizers.sh), which cannot see
// through Debian's uninstrumented gRPC.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bench/load/simulated_worker.h"
#include "spec/job_spec_rules.h"
#include "tests/support/in_process_coordinator.h"
#include "tests/support/wait.h"

namespace stoke::testing {
namespace {

using load::SimulatedWorker;

constexpr int kWorkers = 500;
constexpr int kChannels = 50;  // separate connections, as separate worker processes have
constexpr int kRounds = 3;
constexpr int kJobs = 50;

bool IsTerminal(v1::JobState s) {
  return s == v1::JOB_STATE_SUCCEEDED || s == v1::JOB_STATE_FAILED || s == v1::JOB_STATE_CANCELLED;
}
bool IsQueued(v1::JobState s) {
  return s == v1::JOB_STATE_PENDING || s == v1::JOB_STATE_RESTARTING;
}

v1::JobSpec Spec(int i) {
  v1::JobSpec spec;
  spec.set_name(absl::StrCat("stress-", i));
  spec.mutable_model()->mutable_mlp();
  spec.mutable_data()->mutable_synthetic();
  spec.mutable_training()->set_steps(10);
  spec.set_max_restarts(100);  // worker losses are the point here, not failed jobs
  return spec;
}

std::vector<std::unique_ptr<v1::WorkerLink::Stub>> WorkerStubs(const std::string& address) {
  std::vector<std::unique_ptr<v1::WorkerLink::Stub>> stubs;
  for (int c = 0; c < kChannels; ++c) {
    grpc::ChannelArguments args;
    args.SetInt("stoke.test.channel", c);  // a connection of its own
    stubs.push_back(v1::WorkerLink::NewStub(
        grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args)));
  }
  return stubs;
}

// What the store holds of a job is consistent with itself and with memory: events
// numbered without gaps, at most one final state and nothing after it, the stored state
// the last state change's.
void ExpectConsistent(server::Coordinator& core, server::JobStore& store, const std::string& id) {
  auto stored = store.GetJob(id);
  ASSERT_TRUE(stored.ok()) << stored.status();
  auto events = store.ReadEvents(id, 1, 1000000);
  ASSERT_TRUE(events.ok()) << events.status();
  ASSERT_EQ(events->size(), stored->last_event_seq()) << "job " << id;
  v1::JobState last = v1::JOB_STATE_UNSPECIFIED;
  uint32_t attempt = 0;
  for (size_t i = 0; i < events->size(); ++i) {
    const v1::JobEvent& e = (*events)[i];
    EXPECT_EQ(e.seq(), i + 1) << "job " << id << ": a gap in its events";
    if (!e.has_state_change()) continue;
    EXPECT_FALSE(IsTerminal(last)) << "job " << id << ": a state change after a final state";
    EXPECT_GE(e.state_change().attempt(), attempt) << "job " << id;
    attempt = e.state_change().attempt();
    last = e.state_change().state();
  }
  EXPECT_EQ(stored->state(), last) << "job " << id << ": stored state differs from its events";
  auto live = core.GetJob(id);
  ASSERT_TRUE(live.ok()) << live.status();
  EXPECT_EQ(live->state(), stored->state()) << "job " << id << ": memory and store disagree";
}

TEST(Stress, FiveHundredWorkersComingAndGoingWhileJobsAreSubmittedAndCancelled) {
  InProcessCoordinator::Options options;
  // Losses here come from streams closing. A busy worker whose stream closes is awaited
  // for the heartbeat timeout (it may reconnect holding its task), so keep that short.
  options.heartbeat_timeout = absl::Seconds(4);
  InProcessCoordinator coordinator(options);
  auto stubs = WorkerStubs(coordinator.address());
  auto api = coordinator.Stub();

  std::mutex mu;
  std::vector<std::string> jobs;
  std::map<std::string, bool> cancel_acknowledged;  // job -> CancelJob answered OK
  std::atomic<bool> submitting_done{false};

  // Jobs arrive, and every other one is cancelled a little later, while workers churn.
  std::thread submitter([&] {
    for (int i = 0; i < kJobs; ++i) {
      v1::SubmitJobRequest request;
      *request.mutable_spec() = Spec(i);
      grpc::ClientContext context;
      v1::SubmitJobResponse response;
      const grpc::Status status = api->SubmitJob(&context, request, &response);
      ASSERT_TRUE(status.ok()) << status.error_message();
      std::lock_guard<std::mutex> lock(mu);
      jobs.push_back(response.job().id());
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    submitting_done = true;
  });
  std::thread canceller([&] {
    std::mt19937 random(21);
    size_t next = 0;
    while (true) {
      std::string id;
      {
        std::lock_guard<std::mutex> lock(mu);
        if (next >= jobs.size()) {
          if (submitting_done) break;
        } else {
          id = jobs[next++];
        }
      }
      if (id.empty() || std::stoi(id) % 2 != 0) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
        continue;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(random() % 60));
      v1::CancelJobRequest request;
      request.set_id(id);
      request.set_reason("stress");
      grpc::ClientContext context;
      v1::Job job;
      const grpc::Status status = api->CancelJob(&context, request, &job);
      // A job that finished first cannot be cancelled; anything else is a failure.
      EXPECT_TRUE(status.ok() || status.error_code() == grpc::StatusCode::FAILED_PRECONDITION)
          << status.error_code() << " " << status.error_message();
      if (status.ok()) {
        EXPECT_EQ(job.state(), v1::JOB_STATE_CANCELLED);
      }
      std::lock_guard<std::mutex> lock(mu);
      cancel_acknowledged[id] = status.ok();
    }
  });

  // A failed assertion below returns early; the threads end on their own, and are joined.
  struct JoinAtExit {
    std::thread& a;
    std::thread& b;
    ~JoinAtExit() {
      if (a.joinable()) a.join();
      if (b.joinable()) b.join();
    }
  } join_at_exit{submitter, canceller};
  int assignments = 0;
  for (int round = 0; round < kRounds; ++round) {
    std::vector<std::unique_ptr<SimulatedWorker>> workers;
    SimulatedWorker::Options holds;
    holds.job_length = std::nullopt;  // a job stays with its worker until it goes
    for (int w = 0; w < kWorkers; ++w) {
      workers.push_back(
          std::make_unique<SimulatedWorker>(*stubs[w % kChannels], absl::StrCat("sim-", w), holds));
    }
    for (auto& w : workers) w->Attach();
    // An id whose job still waits for it to come back holding its task (a worker that
    // vanished last round) is refused until the wait ends; like stoke-worker, try again.
    ASSERT_TRUE(WaitFor(
        [&] {
          bool all = true;
          for (int w = 0; w < kWorkers; ++w) {
            if (workers[w]->registered()) continue;
            all = false;
            if (!workers[w]->done()) continue;
            workers[w] = std::make_unique<SimulatedWorker>(*stubs[w % kChannels],
                                                           absl::StrCat("sim-", w), holds);
            workers[w]->Attach();
          }
          return all;
        },
        std::chrono::seconds(30)))
        << "round " << round << ": not every worker was registered";
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    // All at once: half leave as on SIGTERM, half vanish as on kill -9.
    for (int w = 0; w < kWorkers; ++w) workers[w]->Detach(/*gracefully=*/w % 2 == 0);
    for (auto& w : workers) {
      w->Await();
      assignments += static_cast<int>(w->counts().assignments);
    }
    ASSERT_TRUE(WaitFor([&] { return coordinator.core().GetCluster().workers_size() == 0; }))
        << coordinator.core().GetCluster().workers_size() << " workers still attached";
  }
  submitter.join();
  canceller.join();
  EXPECT_GT(assignments, 0) << "no job was ever assigned during the churn";

  // With every worker gone, no job is held for one: each is final or queued, saying why.
  ASSERT_EQ(jobs.size(), static_cast<size_t>(kJobs));
  ASSERT_TRUE(WaitFor([&] {
    for (const auto& id : jobs) {
      auto job = coordinator.core().GetJob(id);
      if (!job.ok() || !(IsTerminal(job->state()) || IsQueued(job->state()))) return false;
    }
    return true;
  }));
  for (const auto& id : jobs) {
    auto job = coordinator.core().GetJob(id);
    ASSERT_TRUE(job.ok());
    if (IsQueued(job->state())) {
      EXPECT_FALSE(job->message().empty()) << "job " << id;
    }
    ExpectConsistent(coordinator.core(), coordinator.store(), id);
  }
  const v1::Cluster idle = coordinator.core().GetCluster();
  EXPECT_EQ(idle.running_jobs(), 0u);

  // Workers that finish what they get drain the queue: every job ends, and every
  // acknowledged cancel holds.
  std::vector<std::unique_ptr<SimulatedWorker>> finishers;
  for (int w = 0; w < 8; ++w) {
    finishers.push_back(std::make_unique<SimulatedWorker>(
        *stubs[w % kChannels], absl::StrCat("finisher-", w), SimulatedWorker::Options{}));
    finishers.back()->Attach();
  }
  ASSERT_TRUE(WaitFor(
      [&] {
        for (const auto& id : jobs) {
          auto job = coordinator.core().GetJob(id);
          if (!job.ok() || !IsTerminal(job->state())) return false;
        }
        return true;
      },
      std::chrono::seconds(60)));
  int cancelled = 0, succeeded = 0;
  for (const auto& id : jobs) {
    auto job = coordinator.core().GetJob(id);
    ASSERT_TRUE(job.ok());
    ExpectConsistent(coordinator.core(), coordinator.store(), id);
    if (cancel_acknowledged[id]) {
      EXPECT_EQ(job->state(), v1::JOB_STATE_CANCELLED) << "job " << id << ": its cancel was lost";
    } else {
      EXPECT_EQ(job->state(), v1::JOB_STATE_SUCCEEDED) << "job " << id << ": " << job->message();
    }
    cancelled += job->state() == v1::JOB_STATE_CANCELLED;
    succeeded += job->state() == v1::JOB_STATE_SUCCEEDED;
  }
  EXPECT_EQ(cancelled + succeeded, kJobs);
  EXPECT_GT(cancelled, 0);
  for (auto& w : finishers) w->Detach(/*gracefully=*/true);
  for (auto& w : finishers) w->Await();
  EXPECT_TRUE(WaitFor([&] { return coordinator.core().GetCluster().workers_size() == 0; }));
  std::cout << kRounds << " rounds of " << kWorkers << " workers: " << assignments
            << " assignments; " << succeeded << " jobs succeeded, " << cancelled << " cancelled\n";
}

// A worker's end of the link, driven by its own thread: the core sends into an inbox
// (under its lock, so nothing here calls back), the thread answers from it.
class InboxConnection final : public server::WorkerConnection {
 public:
  void Send(const v1::CoordinatorMessage& message) override {
    std::lock_guard<std::mutex> lock(mu_);
    inbox_.push_back(message);
  }
  void Close(const std::string&) override {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = true;
  }
  std::vector<v1::CoordinatorMessage> Take() {
    std::lock_guard<std::mutex> lock(mu_);
    return std::exchange(inbox_, {});
  }

 private:
  std::mutex mu_;
  std::vector<v1::CoordinatorMessage> inbox_;
  bool closed_ = false;
};

// The same churn without gRPC, so that ThreadSanitizer sees every lock involved (Debian's
// gRPC is not built with it): worker threads attach, start what they are given, finish
// or vanish, and detach, while jobs are submitted and cancelled from other threads and
// the core's own timer runs.
TEST(Stress, TheCoreUnderConcurrentWorkersSubmissionsAndCancels) {
  TempDir dir;
  auto store = *server::SqliteJobStore::Open({dir.File("stoke.db")});
  server::EventHub hub(*store);
  server::RealClock clock;
  server::Coordinator::Options options;
  options.jobs_dir = dir.File("jobs");
  options.tick_interval = absl::Milliseconds(5);
  // A vanished busy worker is awaited for the heartbeat timeout before its attempt
  // fails; the workers here live for milliseconds, so two seconds is long.
  options.heartbeat_interval = absl::Milliseconds(500);
  options.heartbeat_timeout = absl::Seconds(2);
  auto core = *server::Coordinator::Create(options, *store, hub, clock);
  ASSERT_TRUE(core->Start().ok());

  constexpr int kThreads = 10, kPerThread = 50;  // 500 workers in all
  std::atomic<bool> finishing{false};
  std::atomic<int> assignments{0}, cancels{0};
  auto worker_thread = [&](int t) {
    for (int i = 0; i < kPerThread; ++i) {
      const std::string id = absl::StrCat("core-", t, "-", i);
      auto connection = std::make_shared<InboxConnection>();
      v1::RegisterWorker reg;
      reg.set_worker_id(id);
      reg.mutable_device()->set_type(v1::DEVICE_TYPE_CPU);
      ASSERT_TRUE(core->AttachWorker(reg, "127.0.0.1", connection, "").ok());
      for (int round = 0; round < 3; ++round) {
        for (const auto& m : connection->Take()) {
          v1::WorkerMessage reply;
          if (m.has_assignment()) {
            ++assignments;
            reply.mutable_started()->set_job_id(m.assignment().job_id());
            reply.mutable_started()->set_attempt(m.assignment().attempt());
            core->HandleWorkerMessage(id, reply);
            if (!finishing && i % 3 != 0) continue;  // holds it until it vanishes
            reply.Clear();
            reply.mutable_finished()->set_job_id(m.assignment().job_id());
            reply.mutable_finished()->set_attempt(m.assignment().attempt());
            reply.mutable_finished()->set_outcome(v1::TASK_OUTCOME_SUCCEEDED);
          } else if (m.has_cancel()) {
            ++cancels;
            reply.mutable_finished()->set_job_id(m.cancel().job_id());
            reply.mutable_finished()->set_attempt(m.cancel().attempt());
            reply.mutable_finished()->set_outcome(v1::TASK_OUTCOME_CANCELLED);
          } else {
            continue;
          }
          core->HandleWorkerMessage(id, reply);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
      }
      if (i % 2 == 0) {
        v1::WorkerMessage leaving;
        leaving.mutable_leaving()->set_reason("stress");
        core->HandleWorkerMessage(id, leaving);
      } else {
        core->DetachWorker(id, connection.get(), "stress: vanished");
      }
    }
  };
  std::vector<std::string> jobs(kJobs);
  std::vector<int> cancel_ok(kJobs, 0);
  std::thread submitter([&] {
    for (int i = 0; i < kJobs; ++i) {
      v1::JobSpec spec = Spec(i);
      ASSERT_TRUE(spec::ValidateJobSpec(spec).ok());
      spec::ApplyJobSpecDefaults(spec, *spec::InspectData(spec, spec::DataRoots({})));
      auto job = core->SubmitJob(spec);
      ASSERT_TRUE(job.ok()) << job.status();
      jobs[i] = job->id();
      if (i % 2 == 1) {
        auto cancelled = core->CancelJob(jobs[i - 1], "stress");
        cancel_ok[i - 1] = cancelled.ok();
      }
    }
  });
  std::vector<std::thread> workers;
  for (int t = 0; t < kThreads; ++t) workers.emplace_back(worker_thread, t);
  submitter.join();
  for (auto& w : workers) w.join();
  // Finishing workers drain what is left.
  finishing = true;
  std::vector<std::thread> finishers;
  for (int t = 0; t < 2; ++t) finishers.emplace_back(worker_thread, 100 + t);
  for (auto& f : finishers) f.join();
  EXPECT_EQ(core->GetCluster().workers_size(), 0);
  EXPECT_GT(assignments, kJobs / 2) << "the churn hardly reached the scheduler";
  // Attempts that awaited their vanished workers give up once the timeout has passed.
  EXPECT_TRUE(WaitFor([&] { return core->GetCluster().running_jobs() == 0; }))
      << core->GetCluster().running_jobs() << " jobs still placed";
  std::cout << assignments << " assignments, " << cancels << " cancels of running tasks\n";
  for (int i = 0; i < kJobs; ++i) {
    auto job = core->GetJob(jobs[i]);
    ASSERT_TRUE(job.ok());
    EXPECT_TRUE(IsTerminal(job->state()) || (IsQueued(job->state()) && !job->message().empty()))
        << "job " << jobs[i] << " is " << job->state();
    if (cancel_ok[i]) {
      EXPECT_EQ(job->state(), v1::JOB_STATE_CANCELLED) << "job " << jobs[i];
    }
    ExpectConsistent(*core, *store, jobs[i]);
  }
  core->BeginShutdown();
  core->Stop();
}

}  // namespace
}  // namespace stoke::testing
