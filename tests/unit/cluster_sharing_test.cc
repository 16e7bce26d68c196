// A cluster a team shares, through the real API: who may set which priority, a priority
// changed later (audited), and the preemption that a raised priority brings about, on
// simulated workers speaking the real worker protocol.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "bench/load/simulated_worker.h"
#include "security/token_hash.h"
#include "tests/support/in_process_coordinator.h"
#include "tests/support/wait.h"

namespace stoke::testing {
namespace {

v1::JobSpec Spec(int32_t priority) {
  v1::JobSpec spec;
  spec.set_name("shared");
  spec.mutable_model()->mutable_mlp();
  spec.mutable_data()->mutable_synthetic();
  spec.mutable_training()->set_steps(1000);
  spec.mutable_resources()->set_priority(priority);
  return spec;
}

class ClusterSharing : public ::testing::Test {
 protected:
  // `with_tokens`: alice and bob submitters, root an admin; without, every caller is an
  // admin (and simulated workers need no token).
  void Start(std::optional<int32_t> max_submitter_priority, bool with_tokens,
             const std::string& quotas = "") {
    InProcessCoordinator::Options options;
    options.max_submitter_priority = max_submitter_priority;
    if (!quotas.empty()) options.quotas = *server::Quotas::Parse(quotas, "quotas.yaml");
    for (auto [name, role] :
         {std::pair{"alice", security::Role::kSubmitter},
          std::pair{"bob", security::Role::kSubmitter}, std::pair{"root", security::Role::kAdmin},
          std::pair{"workers", security::Role::kWorker}}) {
      if (!with_tokens) break;
      options.tokens.push_back({name, role, security::HashToken(std::string(name) + "-secret")});
    }
    coordinator_ = std::make_unique<InProcessCoordinator>(options);
    stub_ = coordinator_->Stub();
  }

  grpc::Status Submit(const std::string& who, const v1::JobSpec& spec, std::string* id = nullptr) {
    grpc::ClientContext context;
    context.AddMetadata("authorization", "Bearer " + who + "-secret");
    v1::SubmitJobRequest request;
    *request.mutable_spec() = spec;
    v1::SubmitJobResponse response;
    grpc::Status status = stub_->SubmitJob(&context, request, &response);
    if (id != nullptr) *id = response.job().id();
    return status;
  }

  grpc::Status SetPriority(const std::string& who, const std::string& id, int32_t priority,
                           v1::Job* job = nullptr) {
    grpc::ClientContext context;
    context.AddMetadata("authorization", "Bearer " + who + "-secret");
    v1::SetJobPriorityRequest request;
    request.set_id(id);
    request.set_priority(priority);
    v1::Job response;
    grpc::Status status = stub_->SetJobPriority(&context, request, &response);
    if (job != nullptr) *job = response;
    return status;
  }

  v1::JobState State(const std::string& id) { return coordinator_->core().GetJob(id)->state(); }

  // Workers that hold each job until it is cancelled or preempted, or, with
  // `seconds_per_step`, train its steps at that pace (ticked by the test).
  void AttachWorkers(int n, double seconds_per_step = 0) {
    link_ = coordinator_->WorkerStub();
    load::SimulatedWorker::Options holds;
    holds.job_length = std::nullopt;
    holds.seconds_per_step = seconds_per_step;
    holds.token = "workers-secret";  // a coordinator without tokens ignores it
    for (int i = 0; i < n; ++i) {
      workers_.push_back(
          std::make_unique<load::SimulatedWorker>(*link_, "sim-" + std::to_string(i), holds));
      workers_.back()->Attach();
    }
    ASSERT_TRUE(WaitFor([&] {
      for (const auto& w : workers_) {
        if (!w->registered()) return false;
      }
      return true;
    }));
  }

  void Cancel(const std::string& who, const std::string& id) {
    grpc::ClientContext context;
    context.AddMetadata("authorization", "Bearer " + who + "-secret");
    v1::CancelJobRequest cancel;
    cancel.set_id(id);
    v1::Job cancelled;
    ASSERT_TRUE(stub_->CancelJob(&context, cancel, &cancelled).ok());
  }

  void TearDown() override {
    for (auto& w : workers_) w->Detach(/*gracefully=*/true);
    for (auto& w : workers_) w->Await();
  }

  std::unique_ptr<InProcessCoordinator> coordinator_;
  std::unique_ptr<v1::Coordinator::Stub> stub_;
  std::unique_ptr<v1::WorkerLink::Stub> link_;
  std::vector<std::unique_ptr<load::SimulatedWorker>> workers_;
};

// ValidateJob checks as SubmitJob would, the caller's limits included, answers every
// problem placed in the file, and stores nothing.
TEST_F(ClusterSharing, ValidateJobAnswersEveryProblemInPlaceAndStoresNothing) {
  Start(3, /*with_tokens=*/true);
  auto validate = [&](const v1::ValidateJobRequest& request, v1::ValidateJobResponse* response) {
    grpc::ClientContext context;
    context.AddMetadata("authorization", "Bearer alice-secret");
    return stub_->ValidateJob(&context, request, response);
  };
  v1::ValidateJobRequest request;
  request.set_job_file_name("job.yaml");
  request.set_job_file(
      "model: {mlp: {dropout: 3}}\n"
      "data: {synthetic: {}}\n"
      "training:\n"
      "  steps: 0\n"
      "  colour: red\n");
  v1::ValidateJobResponse response;
  ASSERT_TRUE(validate(request, &response).ok());
  std::vector<std::string> found;
  for (const auto& p : response.problems()) {
    found.push_back(absl::StrCat(p.line(), ":", p.column(), " ", p.field()));
  }
  EXPECT_EQ(found, (std::vector<std::string>{"5:3 training.colour", "1:15 model.mlp.dropout",
                                             "4:3 training.steps"}));
  EXPECT_EQ(response.spec().training().steps(), 0u);  // as read
  EXPECT_FALSE(response.has_completed());

  // A valid job comes back as it would be stored, every default filled in.
  request.Clear();
  *request.mutable_spec() = Spec(2);
  response.Clear();
  ASSERT_TRUE(validate(request, &response).ok());
  EXPECT_EQ(response.problems_size(), 0);
  EXPECT_TRUE(response.completed().has_max_restarts());
  EXPECT_GT(response.completed().training().batch_size(), 0u);

  // The submitter's priority cap holds here as in SubmitJob.
  *request.mutable_spec() = Spec(5);
  EXPECT_EQ(validate(request, &response).error_code(), grpc::StatusCode::PERMISSION_DENIED);

  grpc::ClientContext context;
  context.AddMetadata("authorization", "Bearer root-secret");
  v1::ListJobsResponse jobs;
  ASSERT_TRUE(stub_->ListJobs(&context, v1::ListJobsRequest(), &jobs).ok());
  EXPECT_EQ(jobs.jobs_size(), 0);
}

TEST_F(ClusterSharing, SubmittersStayWithinTheirPriorityAndOnlyAdminsProtectLowPriorityJobs) {
  Start(3, /*with_tokens=*/true);
  grpc::Status status = Submit("alice", Spec(5));
  EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_NE(status.error_message().find("spec.resources.priority: 5 is above 3, the highest a "
                                        "submitter may set (stoke-coordinator --max-priority "
                                        "submitter=3)"),
            std::string::npos)
      << status.error_message();
  v1::JobSpec protected_spec = Spec(-2);
  protected_spec.mutable_resources()->set_preemptible(false);
  status = Submit("alice", protected_spec);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_NE(status.error_message().find("spec.resources.preemptible: false; only an admin"),
            std::string::npos)
      << status.error_message();
  EXPECT_TRUE(Submit("root", Spec(50)).ok());
  EXPECT_TRUE(Submit("root", protected_spec).ok());

  std::string id;
  ASSERT_TRUE(Submit("alice", Spec(2), &id).ok());
  status = SetPriority("alice", id, 4);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED) << status.error_message();
  EXPECT_NE(status.error_message().find("priority: 4 is above 3"), std::string::npos)
      << status.error_message();
  status = SetPriority("bob", id, 1);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED) << "not bob's job";
  v1::Job changed;
  ASSERT_TRUE(SetPriority("alice", id, 3, &changed).ok());
  EXPECT_EQ(changed.spec().resources().priority(), 3);
  ASSERT_TRUE(SetPriority("root", id, 40, &changed).ok());
  EXPECT_EQ(changed.spec().resources().priority(), 40);
  EXPECT_EQ(coordinator_->core().GetJob(id)->spec().resources().priority(), 40)
      << "the change is the job's from now on";

  // Each change is audited, refused ones too, naming who asked.
  auto audit = coordinator_->store().ListAudit(0, 100);
  ASSERT_TRUE(audit.ok()) << audit.status();
  int changes = 0, refused = 0;
  for (const auto& entry : audit->entries) {
    if (entry.action() != "SetJobPriority" || entry.target() != id) continue;
    ++changes;
    if (entry.result() != "OK") ++refused;
  }
  EXPECT_EQ(changes, 4);
  EXPECT_EQ(refused, 2);

  // A finished job's priority is history.
  grpc::ClientContext context;
  context.AddMetadata("authorization", "Bearer alice-secret");
  v1::CancelJobRequest cancel;
  cancel.set_id(id);
  v1::Job cancelled;
  ASSERT_TRUE(stub_->CancelJob(&context, cancel, &cancelled).ok());
  status = SetPriority("root", id, 1);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << status.error_message();
}

// One device, held by a job of priority -1; a second of the same priority waits. Raised
// above it, the second preempts the first at once; cancelled, it gives the device back and
// the first resumes, its preemption counted and no restart spent.
TEST_F(ClusterSharing, RaisingAWaitingJobsPriorityPreemptsALowerOneThatThenResumes) {
  Start(std::nullopt, /*with_tokens=*/false);
  AttachWorkers(1);
  std::string low, second;
  ASSERT_TRUE(Submit("alice", Spec(-1), &low).ok());
  ASSERT_TRUE(WaitFor([&] { return State(low) == v1::JOB_STATE_RUNNING; }));
  ASSERT_TRUE(Submit("bob", Spec(-1), &second).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(State(low), v1::JOB_STATE_RUNNING) << "an equal priority preempts nobody";
  EXPECT_EQ(State(second), v1::JOB_STATE_PENDING);

  ASSERT_TRUE(SetPriority("root", second, 1).ok());
  ASSERT_TRUE(WaitFor([&] { return State(second) == v1::JOB_STATE_RUNNING; }));
  v1::Job preempted = *coordinator_->core().GetJob(low);
  EXPECT_EQ(preempted.state(), v1::JOB_STATE_PREEMPTED);
  EXPECT_NE(preempted.message().find("preempted for job " + second), std::string::npos)
      << preempted.message();
  EXPECT_EQ(preempted.preemptions(), 1u);
  EXPECT_EQ(workers_[0]->counts().preempted, 1u);

  Cancel("bob", second);
  ASSERT_TRUE(WaitFor([&] { return State(low) == v1::JOB_STATE_RUNNING; }));
  const v1::Job resumed = *coordinator_->core().GetJob(low);
  EXPECT_EQ(resumed.attempt(), 2u);
  EXPECT_EQ(resumed.restarts(), 0u);
  EXPECT_EQ(coordinator_->core().GetCluster().preemptions(), 1u);
}

// Quotas with borrowing: bob (in no group) fills both workers while alice's guarantee of
// one lies idle; when alice submits, her job reclaims the device from bob's newest job,
// though bob's is of higher priority and not preemptible by priority.
TEST_F(ClusterSharing, AGroupReclaimsItsGuaranteedDeviceFromABorrower) {
  Start(std::nullopt, /*with_tokens=*/true, "groups:\n  vision: {owners: [alice], cpus: 1}\n");
  AttachWorkers(2);
  std::string first, second, mine;
  ASSERT_TRUE(Submit("bob", Spec(3), &first).ok());
  ASSERT_TRUE(WaitFor([&] { return State(first) == v1::JOB_STATE_RUNNING; }));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // a later start
  ASSERT_TRUE(Submit("bob", Spec(3), &second).ok());
  ASSERT_TRUE(WaitFor([&] { return State(second) == v1::JOB_STATE_RUNNING; }));
  v1::Cluster cluster = coordinator_->core().GetCluster();
  ASSERT_EQ(cluster.quotas_size(), 1);
  EXPECT_EQ(cluster.quotas(0).used_cpus(), 0u);
  EXPECT_EQ(cluster.quotas(0).guaranteed_cpus(), 1u);

  ASSERT_TRUE(Submit("alice", Spec(0), &mine).ok());
  ASSERT_TRUE(WaitFor([&] { return State(mine) == v1::JOB_STATE_RUNNING; }))
      << v1::JobState_Name(State(mine));
  EXPECT_EQ(State(first), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(State(second), v1::JOB_STATE_PREEMPTED) << "the newest borrower gives it back";
  cluster = coordinator_->core().GetCluster();
  EXPECT_EQ(cluster.quotas(0).used_cpus(), 1u);

  // Within its guarantee alice's group is not a borrower: a second job of hers waits.
  std::string more;
  ASSERT_TRUE(Submit("alice", Spec(0), &more).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(State(more), v1::JOB_STATE_PENDING);
  EXPECT_EQ(State(first), v1::JOB_STATE_RUNNING);
}

// Fair share: alice has used the one worker; when it frees, bob's job, submitted after
// alice's second, goes first. Within one owner, jobs keep their submission order.
TEST_F(ClusterSharing, AnOwnerWithLessRecentUseGoesFirstAmongEqualPriorities) {
  Start(std::nullopt, /*with_tokens=*/true);
  AttachWorkers(1);
  std::string used, alice_next, alice_last, bob_next;
  ASSERT_TRUE(Submit("alice", Spec(0), &used).ok());
  ASSERT_TRUE(WaitFor([&] { return State(used) == v1::JOB_STATE_RUNNING; }));
  ASSERT_TRUE(Submit("alice", Spec(0), &alice_next).ok());
  ASSERT_TRUE(Submit("alice", Spec(0), &alice_last).ok());
  ASSERT_TRUE(Submit("bob", Spec(0), &bob_next).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // alice's use accrues
  Cancel("alice", used);
  ASSERT_TRUE(WaitFor([&] { return State(bob_next) == v1::JOB_STATE_RUNNING; }));
  EXPECT_EQ(State(alice_next), v1::JOB_STATE_PENDING);
  Cancel("bob", bob_next);
  ASSERT_TRUE(WaitFor([&] { return State(alice_next) == v1::JOB_STATE_RUNNING; }));
  EXPECT_EQ(State(alice_last), v1::JOB_STATE_PENDING);

  const v1::Cluster cluster = coordinator_->core().GetCluster();
  std::map<std::string, v1::OwnerUse> owners;
  for (const auto& o : cluster.owners()) owners[o.owner()] = o;
  EXPECT_GT(owners["alice"].recent_device_hours(), owners["bob"].recent_device_hours());
  EXPECT_EQ(owners["alice"].running_jobs(), 1u);
  EXPECT_EQ(owners["alice"].queued_jobs(), 1u);
}

// A queued job's place and predicted start: from the running job's remaining steps at its
// measured step time; it starts when predicted.
TEST_F(ClusterSharing, AQueuedJobIsToldItsPlaceAndWhenItWillStart) {
  Start(std::nullopt, /*with_tokens=*/false);
  AttachWorkers(1, /*seconds_per_step=*/0.002);
  std::atomic<bool> ticking{true};
  std::thread ticker([&] {
    while (ticking) {
      for (auto& w : workers_) w->Tick(load::SimulatedWorker::Clock::now());
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  });
  v1::JobSpec spec = Spec(0);
  spec.mutable_training()->set_steps(1500);  // 3 s
  std::string running, queued;
  ASSERT_TRUE(Submit("alice", spec, &running).ok());
  ASSERT_TRUE(WaitFor(
      [&] { return coordinator_->core().GetJob(running)->latest_metrics().step_seconds() > 0; }));
  ASSERT_TRUE(Submit("alice", spec, &queued).ok());
  const v1::Job waiting = *coordinator_->core().GetJob(queued);
  EXPECT_EQ(waiting.queue_position(), 1u);
  ASSERT_TRUE(waiting.has_predicted_start_time());
  const absl::Time predicted = absl::FromUnixSeconds(waiting.predicted_start_time().seconds()) +
                               absl::Nanoseconds(waiting.predicted_start_time().nanos());
  EXPECT_GT(predicted, absl::Now());
  EXPECT_LT(predicted, absl::Now() + absl::Seconds(3.5));
  ASSERT_TRUE(WaitFor([&] { return State(queued) == v1::JOB_STATE_RUNNING; }));
  const v1::Job started = *coordinator_->core().GetJob(queued);
  const absl::Time actual = absl::FromUnixSeconds(started.start_time().seconds()) +
                            absl::Nanoseconds(started.start_time().nanos());
  EXPECT_LT(absl::AbsDuration(actual - predicted), absl::Seconds(1))
      << "predicted " << predicted << ", started " << actual;
  EXPECT_EQ(started.queue_position(), 0u) << "a running job has no place in the queue";
  ticking = false;
  ticker.join();
}

}  // namespace
}  // namespace stoke::testing
