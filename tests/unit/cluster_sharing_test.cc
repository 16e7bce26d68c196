// A cluster a team shares, through the real API: who may set which priority, a priority
// changed later (audited), and the preemption that a raised priority brings about, on
// simulated workers speaking the real worker protocol.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <string>
#include <thread>

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
  void Start(std::optional<int32_t> max_submitter_priority, bool with_tokens) {
    InProcessCoordinator::Options options;
    options.max_submitter_priority = max_submitter_priority;
    for (auto [name, role] : {std::pair{"alice", security::Role::kSubmitter},
                              std::pair{"bob", security::Role::kSubmitter},
                              std::pair{"root", security::Role::kAdmin}}) {
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

  std::unique_ptr<InProcessCoordinator> coordinator_;
  std::unique_ptr<v1::Coordinator::Stub> stub_;
};

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
  auto link = coordinator_->WorkerStub();
  load::SimulatedWorker::Options holds;
  holds.job_length = std::nullopt;
  load::SimulatedWorker worker(*link, "sim-0", holds);
  worker.Attach();
  ASSERT_TRUE(WaitFor([&] { return worker.registered(); }));

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
  EXPECT_EQ(worker.counts().preempted, 1u);

  grpc::ClientContext context;
  context.AddMetadata("authorization", "Bearer bob-secret");
  v1::CancelJobRequest cancel;
  cancel.set_id(second);
  v1::Job cancelled;
  ASSERT_TRUE(stub_->CancelJob(&context, cancel, &cancelled).ok());
  ASSERT_TRUE(WaitFor([&] { return State(low) == v1::JOB_STATE_RUNNING; }));
  const v1::Job resumed = *coordinator_->core().GetJob(low);
  EXPECT_EQ(resumed.attempt(), 2u);
  EXPECT_EQ(resumed.restarts(), 0u);
  EXPECT_EQ(coordinator_->core().GetCluster().preemptions(), 1u);
  worker.Detach(/*gracefully=*/true);
  worker.Await();
}

}  // namespace
}  // namespace stoke::testing
