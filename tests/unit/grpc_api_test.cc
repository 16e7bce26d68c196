// The coordinator's gRPC services in a real server on loopback, in this process, over the
// real core and a SQLite store: what reaches the API from outside (hundreds of worker
// streams closing at once, made-up method names) leaves the coordinator up and its
// metrics bounded.
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "security/token_hash.h"
#include "server/api/coordinator_service.h"
#include "server/api/executor.h"
#include "server/api/grpc_server.h"
#include "server/api/grpc_status.h"
#include "server/api/worker_link_service.h"
#include "server/metrics/coordinator_metrics.h"
#include "server/store/sqlite_job_store.h"
#include "spec/job_spec_rules.h"
#include "stoke/v1/worker_link.grpc.pb.h"
#include "tests/support/in_process_coordinator.h"
#include "tests/support/wait.h"

namespace stoke::server {
namespace {

using testing::InProcessCoordinator;

// One worker's stream, as the worker's link opens it (registration only; it never reads
// what it is sent, as a worker that hangs would not).
struct FakeWorkerStream {
  grpc::ClientContext context;
  std::unique_ptr<grpc::ClientReaderWriter<v1::WorkerMessage, v1::CoordinatorMessage>> stream;
};

TEST(GrpcApi, HundredsOfWorkerStreamsClosingAtOnceWhileJobsAreAssigned) {
  InProcessCoordinator coordinator;
  constexpr int kChannels = 30;
  constexpr int kStreamsPerChannel = 10;
  std::vector<std::unique_ptr<v1::WorkerLink::Stub>> stubs;
  for (int c = 0; c < kChannels; ++c) {
    grpc::ChannelArguments args;
    args.SetInt("stoke.test.channel", c);  // a connection of its own, as separate workers
    stubs.push_back(v1::WorkerLink::NewStub(grpc::CreateCustomChannel(
        coordinator.address(), grpc::InsecureChannelCredentials(), args)));
  }
  std::vector<std::string> jobs;
  for (int round = 0; round < 3; ++round) {
    std::vector<std::unique_ptr<FakeWorkerStream>> workers;
    for (int c = 0; c < kChannels; ++c) {
      for (int s = 0; s < kStreamsPerChannel; ++s) {
        auto w = std::make_unique<FakeWorkerStream>();
        w->stream = stubs[c]->Attach(&w->context);
        v1::WorkerMessage reg;
        reg.mutable_register_()->set_worker_id("w" + std::to_string(c) + "-" + std::to_string(s));
        reg.mutable_register_()->set_host("host-" + std::to_string(c));
        reg.mutable_register_()->mutable_device()->set_type(v1::DEVICE_TYPE_CPU);
        ASSERT_TRUE(w->stream->Write(reg));
        workers.push_back(std::move(w));
      }
    }
    ASSERT_TRUE(testing::WaitFor([&] {
      return coordinator.core().GetCluster().workers_size() == kChannels * kStreamsPerChannel;
    })) << coordinator.core().GetCluster().workers_size();
    // Jobs keep arriving (and being assigned, and re-queued) while every stream drops.
    std::thread submitter([&] {
      for (int i = 0; i < 150; ++i) jobs.push_back(coordinator.Submit());
    });
    for (auto& w : workers) w->context.TryCancel();
    submitter.join();
    for (auto& w : workers) w->stream->Finish();
    ASSERT_TRUE(testing::WaitFor([&] {
      return coordinator.core().GetCluster().workers_size() == 0;
    })) << coordinator.core().GetCluster().workers_size()
        << " workers still attached";
  }
  // Nothing holds a job for a worker that is gone: every job is waiting for devices.
  ASSERT_TRUE(testing::WaitFor([&] {
    for (const auto& id : jobs) {
      auto job = coordinator.core().GetJob(id);
      if (!job.ok()) return false;
      if (job->state() != v1::JOB_STATE_PENDING && job->state() != v1::JOB_STATE_RESTARTING) {
        return false;
      }
    }
    return true;
  }));
  EXPECT_EQ(jobs.size(), 450u);
}

TEST(GrpcApi, MadeUpMethodNamesShareOneMetricLabel) {
  InProcessCoordinator coordinator;
  auto channel = grpc::CreateChannel(coordinator.address(), grpc::InsecureChannelCredentials());
  grpc::GenericStub stub(channel);
  for (int i = 0; i < 50; ++i) {
    grpc::ClientContext context;
    grpc::Slice empty("");
    grpc::ByteBuffer request(&empty, 1), response;
    grpc::Status status;
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    const std::string method = i % 2 ? "/stoke.v1.Coordinator/Made" + std::to_string(i)
                                     : "/no.Such/Method" + std::to_string(i);
    stub.UnaryCall(&context, method, grpc::StubOptions(), &request, &response, [&](grpc::Status s) {
      std::lock_guard<std::mutex> lock(mu);
      status = s;
      done = true;
      cv.notify_one();
    });
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return done; });
    EXPECT_EQ(status.error_code(), grpc::StatusCode::UNIMPLEMENTED);
  }
  auto client = v1::Coordinator::NewStub(channel);
  grpc::ClientContext context;
  v1::Cluster cluster;
  ASSERT_TRUE(client->GetCluster(&context, v1::GetClusterRequest(), &cluster).ok());
  const std::string text = coordinator.metrics().Exposition();
  EXPECT_EQ(text.find("Made"), std::string::npos) << text;
  EXPECT_EQ(text.find("no.Such"), std::string::npos) << text;
  EXPECT_NE(text.find("grpc_method=\"unknown\",grpc_service=\"unknown\""), std::string::npos)
      << text;
  EXPECT_NE(text.find("grpc_method=\"GetCluster\",grpc_service=\"stoke.v1.Coordinator\""),
            std::string::npos)
      << text;
}

v1::JobSpec SyntheticSpec(const std::string& name) {
  v1::JobSpec spec;
  spec.set_name(name);
  spec.mutable_model()->mutable_mlp();
  spec.mutable_data()->mutable_synthetic();
  spec.mutable_training()->set_steps(10);
  return spec;
}

TEST(GrpcApi, ASubmissionRetriedWithItsRequestIdCreatesOneJob) {
  InProcessCoordinator coordinator;
  auto stub = coordinator.Stub();
  v1::SubmitJobRequest request;
  *request.mutable_spec() = SyntheticSpec("once");
  request.set_request_id("4f1c0b9e-retry");
  std::vector<std::string> ids;
  for (int i = 0; i < 3; ++i) {
    grpc::ClientContext context;
    v1::SubmitJobResponse response;
    ASSERT_TRUE(stub->SubmitJob(&context, request, &response).ok());
    ids.push_back(response.job().id());
  }
  EXPECT_EQ(ids, std::vector<std::string>(3, ids.front()));
  // The same id with another spec is a mistake, not a retry.
  *request.mutable_spec() = SyntheticSpec("another");
  grpc::ClientContext context;
  v1::SubmitJobResponse response;
  grpc::Status status = stub->SubmitJob(&context, request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::ALREADY_EXISTS) << status.error_message();
  EXPECT_NE(status.error_message().find("request_id"), std::string::npos);
  // Without an id every call is a new job.
  request.clear_request_id();
  grpc::ClientContext again;
  ASSERT_TRUE(stub->SubmitJob(&again, request, &response).ok());
  EXPECT_NE(response.job().id(), ids.front());
  // One audit entry per call, in call order (newest first): a new job's is stored with
  // the job, a retry's and a refusal's on their own.
  grpc::ClientContext audit_context;
  v1::ListAuditResponse audit;
  ASSERT_TRUE(stub->ListAudit(&audit_context, v1::ListAuditRequest(), &audit).ok());
  std::vector<std::string> calls;
  for (const auto& entry : audit.entries()) {
    calls.push_back(entry.action() + " " + entry.target() + " " + entry.result().substr(0, 14));
  }
  const std::string first = "SubmitJob " + ids.front() + " OK";
  EXPECT_EQ(calls, (std::vector<std::string>{"SubmitJob " + response.job().id() + " OK",
                                             "SubmitJob  ALREADY_EXISTS", first, first, first}));
}

// A slow disk (here: another connection holding SQLite's write lock) stalls every write,
// and with it the calls that wait for the core's lock; reads of a live job answer anyway.
TEST(GrpcApi, ReadsAnswerWhileWritesWaitForTheDisk) {
  InProcessCoordinator coordinator;
  const std::string id = coordinator.Submit();
  auto stub = coordinator.Stub();
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(coordinator.dir().File("stoke.db").c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr), SQLITE_OK);
  // More stalled submissions than the executor has threads.
  std::vector<std::thread> submitters;
  for (int i = 0; i < 8; ++i) {
    submitters.emplace_back([&] {
      grpc::ClientContext context;
      v1::SubmitJobRequest request;
      *request.mutable_spec() = SyntheticSpec("stalled");
      v1::SubmitJobResponse response;
      EXPECT_TRUE(stub->SubmitJob(&context, request, &response).ok());
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const auto start = std::chrono::steady_clock::now();
  grpc::ClientContext get_context;
  get_context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
  v1::GetJobRequest get;
  get.set_id(id);
  v1::Job job;
  const grpc::Status got = stub->GetJob(&get_context, get, &job);
  const auto took = std::chrono::steady_clock::now() - start;
  sqlite3_exec(db, "COMMIT", nullptr, nullptr, nullptr);
  sqlite3_close(db);
  for (auto& t : submitters) t.join();
  ASSERT_TRUE(got.ok()) << got.error_message();
  EXPECT_EQ(job.state(), v1::JOB_STATE_PENDING);
  EXPECT_LT(took, std::chrono::seconds(1));
}

TEST(GrpcApi, UnknownFieldsAreNotStoredAndOverlongFieldsAreRefused) {
  InProcessCoordinator coordinator;
  auto stub = coordinator.Stub();
  v1::SubmitJobRequest request;
  *request.mutable_spec() = SyntheticSpec("blob");
  // A field this coordinator does not know, holding a megabyte.
  request.mutable_spec()
      ->GetReflection()
      ->MutableUnknownFields(request.mutable_spec())
      ->AddLengthDelimited(9999, std::string(1 << 20, 'u'));
  grpc::ClientContext submit;
  v1::SubmitJobResponse submitted;
  ASSERT_TRUE(stub->SubmitJob(&submit, request, &submitted).ok());
  grpc::ClientContext list;
  v1::ListJobsResponse jobs;
  ASSERT_TRUE(stub->ListJobs(&list, v1::ListJobsRequest(), &jobs).ok());
  ASSERT_EQ(jobs.jobs_size(), 1);
  EXPECT_LT(jobs.ByteSizeLong(), 64u * 1024) << "the blob was stored";

  v1::CancelJobRequest cancel;
  cancel.set_id(submitted.job().id());
  cancel.set_reason(std::string(1 << 20, 'r'));
  grpc::ClientContext cancel_context;
  v1::Job cancelled;
  grpc::Status status = stub->CancelJob(&cancel_context, cancel, &cancelled);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(status.error_message(), "reason: at most 4096 bytes");

  v1::GetJobRequest get;
  get.set_id(std::string(5 << 20, '7'));
  grpc::ClientContext get_context;
  v1::Job job;
  status = stub->GetJob(&get_context, get, &job);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(status.error_message(), "id: at most 256 bytes");

  v1::SubmitJobRequest bad_enum;
  *bad_enum.mutable_spec() = SyntheticSpec("enum");
  bad_enum.mutable_spec()->mutable_model()->mutable_mlp()->set_activation(
      static_cast<v1::Activation>(999));
  grpc::ClientContext enum_context;
  status = stub->SubmitJob(&enum_context, bad_enum, &submitted);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(status.error_message().rfind("spec.model.mlp.activation: unknown value 999", 0), 0u)
      << status.error_message();
}

TEST(GrpcApi, JobIdsHaveOneSpellingInEveryCall) {
  InProcessCoordinator coordinator;
  auto stub = coordinator.Stub();
  for (int i = 0; i < 13; ++i) {
    v1::SubmitJobRequest request;
    *request.mutable_spec() = SyntheticSpec("j");
    grpc::ClientContext context;
    v1::SubmitJobResponse response;
    ASSERT_TRUE(stub->SubmitJob(&context, request, &response).ok());
  }
  for (const std::string alias : {"01", "013", "+1"}) {
    grpc::ClientContext get_context;
    v1::GetJobRequest get;
    get.set_id(alias);
    v1::Job job;
    EXPECT_EQ(stub->GetJob(&get_context, get, &job).error_code(), grpc::StatusCode::NOT_FOUND)
        << alias;
    grpc::ClientContext cancel_context;
    v1::CancelJobRequest cancel;
    cancel.set_id(alias);
    EXPECT_EQ(stub->CancelJob(&cancel_context, cancel, &job).error_code(),
              grpc::StatusCode::NOT_FOUND)
        << alias;
    grpc::ClientContext checkpoints_context;
    v1::ListCheckpointsRequest checkpoints;
    checkpoints.set_id(alias);
    v1::ListCheckpointsResponse listed;
    EXPECT_EQ(stub->ListCheckpoints(&checkpoints_context, checkpoints, &listed).error_code(),
              grpc::StatusCode::NOT_FOUND)
        << alias;
  }
}

TEST(GrpcApi, AWorkerRegisteringAHugeIdIsRefused) {
  InProcessCoordinator coordinator;
  auto stub = v1::WorkerLink::NewStub(
      grpc::CreateChannel(coordinator.address(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  auto stream = stub->Attach(&context);
  v1::WorkerMessage reg;
  reg.mutable_register_()->set_worker_id(std::string(5 << 20, 'w'));
  ASSERT_TRUE(stream->Write(reg));
  stream->WritesDone();
  v1::CoordinatorMessage ignored;
  while (stream->Read(&ignored)) {
  }
  grpc::Status status = stream->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(status.error_message(), "register.worker_id: at most 256 bytes");
  EXPECT_EQ(coordinator.core().GetCluster().workers_size(), 0);
}

TEST(GrpcApi, AWorkersLongErrorIsCutBeforeItIsStored) {
  InProcessCoordinator coordinator;
  auto stub = v1::WorkerLink::NewStub(
      grpc::CreateChannel(coordinator.address(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  auto stream = stub->Attach(&context);
  v1::WorkerMessage reg;
  reg.mutable_register_()->set_worker_id("w");
  reg.mutable_register_()->mutable_device()->set_type(v1::DEVICE_TYPE_CPU);
  ASSERT_TRUE(stream->Write(reg));
  const std::string id = coordinator.Submit();
  v1::CoordinatorMessage received;
  while (stream->Read(&received) && !received.has_assignment()) {
  }
  ASSERT_TRUE(received.has_assignment());
  v1::WorkerMessage started;
  started.mutable_started()->set_job_id(id);
  started.mutable_started()->set_attempt(received.assignment().attempt());
  ASSERT_TRUE(stream->Write(started));
  v1::WorkerMessage finished;
  finished.mutable_finished()->set_job_id(id);
  finished.mutable_finished()->set_attempt(received.assignment().attempt());
  finished.mutable_finished()->set_outcome(v1::TASK_OUTCOME_FAILED);
  finished.mutable_finished()->set_retryable(false);
  finished.mutable_finished()->set_message(std::string(5 << 20, 'e'));
  ASSERT_TRUE(stream->Write(finished));
  ASSERT_TRUE(testing::WaitFor([&] {
    auto job = coordinator.core().GetJob(id);
    return job.ok() && job->state() == v1::JOB_STATE_FAILED;
  }));
  const v1::Job job = *coordinator.core().GetJob(id);
  EXPECT_LT(job.message().size(), 5000u);
  EXPECT_NE(job.message().find("more bytes)"), std::string::npos);
  context.TryCancel();
}

TEST(GrpcApi, LongErrorMessagesAreCutToFitInTrailers) {
  const grpc::Status status =
      ToGrpcStatus(absl::InvalidArgumentError("x: " + std::string(10 << 20, 'e')));
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_LT(status.error_message().size(), 2100u);
  EXPECT_NE(status.error_message().find("more bytes)"), std::string::npos);
}

// A string field that is not UTF-8 cannot be parsed as the request. gRPC's callback
// handlers (1.51) would answer UNIMPLEMENTED with no message; the coordinator's answer
// names the field, and it keeps serving.
TEST(GrpcApi, InvalidUtf8IsRefusedNamingTheFieldAndTheServerStaysUp) {
  InProcessCoordinator coordinator;
  auto channel = grpc::CreateChannel(coordinator.address(), grpc::InsecureChannelCredentials());
  grpc::GenericStub generic(channel);
  const std::string bytes = std::string("\x0a\x02\xff\xfe");  // GetJobRequest{id: ff fe}
  grpc::Slice slice(bytes);
  grpc::ByteBuffer request(&slice, 1), response;
  grpc::ClientContext context;
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  grpc::Status status;
  generic.UnaryCall(&context, "/stoke.v1.Coordinator/GetJob", grpc::StubOptions(), &request,
                    &response, [&](grpc::Status s) {
                      std::lock_guard<std::mutex> lock(mu);
                      status = s;
                      done = true;
                      cv.notify_one();
                    });
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return done; });
  }
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
  EXPECT_EQ(status.error_message(), "id: not valid UTF-8");
  grpc::ClientContext next;
  v1::Cluster cluster;
  EXPECT_TRUE(coordinator.Stub()->GetCluster(&next, v1::GetClusterRequest(), &cluster).ok());
}

// One caller's watch streams are capped, others' are not, and a closed stream makes room.
TEST(GrpcApi, ACallersOpenWatchStreamsAreCapped) {
  InProcessCoordinator::Options options;
  options.max_watch_streams_per_caller = 2;
  for (const std::string name : {"alice", "bob"}) {
    options.tokens.push_back(
        {name, security::Role::kViewer, security::HashToken(name + "-secret")});
  }
  InProcessCoordinator coordinator(options);
  const std::string id = coordinator.Submit();
  auto stub = coordinator.Stub();
  struct Watch {
    grpc::ClientContext context;
    std::unique_ptr<grpc::ClientReader<v1::JobEvent>> reader;
    v1::JobEvent first;
  };
  // Opens a watch as `who` and reads its first event (the submission): true when it is open.
  auto open = [&](const std::string& who, Watch* watch) {
    watch->context.AddMetadata("authorization", "Bearer " + who + "-secret");
    v1::WatchJobRequest request;
    request.set_id(id);
    watch->reader = stub->WatchJob(&watch->context, request);
    return watch->reader->Read(&watch->first);
  };
  Watch a1, a2, a3, b1;
  ASSERT_TRUE(open("alice", &a1));
  ASSERT_TRUE(open("alice", &a2));
  EXPECT_FALSE(open("alice", &a3));
  const grpc::Status refused = a3.reader->Finish();
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(refused.error_message().find("alice has 2 watch streams open"), std::string::npos)
      << refused.error_message();
  EXPECT_TRUE(open("bob", &b1)) << "another caller was held back";
  // Closing one gives its place back, once the server has seen it go.
  a1.context.TryCancel();
  a1.reader->Finish().IgnoreError();
  bool reopened = false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!reopened && std::chrono::steady_clock::now() < deadline) {
    auto again = std::make_unique<Watch>();
    reopened = open("alice", again.get());
    if (!reopened) {
      again->reader->Finish().IgnoreError();
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    } else {
      again->context.TryCancel();
      again->reader->Finish().IgnoreError();
    }
  }
  EXPECT_TRUE(reopened);
  for (Watch* w : {&a2, &b1}) {
    w->context.TryCancel();
    w->reader->Finish().IgnoreError();
  }
}

// A client that cancels a watch as soon as it has read an event races the server's write of
// that event: the write can complete after the cancellation. Each such stream must still
// end, or the coordinator's shutdown waits for it forever (seen as a hung test under load).
TEST(GrpcApi, WatchesCancelledJustAfterAnEventStillLetTheServerShutDown) {
  auto coordinator = std::make_unique<InProcessCoordinator>();
  const std::string id = coordinator->Submit();
  auto stub = coordinator->Stub();
  constexpr int kWatches = 400;
  std::vector<std::thread> clients;
  for (int t = 0; t < 4; ++t) {
    clients.emplace_back([&] {
      for (int i = 0; i < kWatches / 4; ++i) {
        grpc::ClientContext context;
        v1::WatchJobRequest request;
        request.set_id(id);
        auto reader = stub->WatchJob(&context, request);
        v1::JobEvent event;
        EXPECT_TRUE(reader->Read(&event));
        context.TryCancel();
        reader->Finish().IgnoreError();
      }
    });
  }
  for (auto& client : clients) client.join();
  // The destructor shuts the server down with a 500 ms grace; it waits for every stream.
  // The shutdown thread owns what it touches, so that a hung one can be left behind.
  auto shut_down = std::make_shared<std::atomic<bool>>(false);
  std::thread shutdown([owned = std::move(coordinator), shut_down]() mutable {
    owned.reset();
    *shut_down = true;
  });
  if (!testing::WaitFor([&] { return shut_down->load(); }, std::chrono::seconds(30))) {
    shutdown.detach();
    FAIL() << "shutdown still waits for a watch stream after 30 s";
  }
  shutdown.join();
}

// One submitter cannot grow the queue without bound: past its cap of unfinished jobs its
// submissions are refused, others' are not, and a finished job makes room.
TEST(GrpcApi, AnOwnersUnfinishedJobsAreCapped) {
  InProcessCoordinator::Options options;
  options.max_unfinished_jobs_per_owner = 3;
  for (const std::string name : {"alice", "bob"}) {
    options.tokens.push_back(
        {name, security::Role::kSubmitter, security::HashToken(name + "-secret")});
  }
  InProcessCoordinator coordinator(options);
  auto stub = coordinator.Stub();
  auto submit = [&](const std::string& who, v1::SubmitJobResponse* response) {
    grpc::ClientContext context;
    context.AddMetadata("authorization", "Bearer " + who + "-secret");
    v1::SubmitJobRequest request;
    *request.mutable_spec() = SyntheticSpec(who);
    return stub->SubmitJob(&context, request, response);
  };
  std::vector<std::string> ids;
  for (int i = 0; i < 3; ++i) {
    v1::SubmitJobResponse response;
    ASSERT_TRUE(submit("alice", &response).ok());
    ids.push_back(response.job().id());
  }
  v1::SubmitJobResponse response;
  grpc::Status status = submit("alice", &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(status.error_message().find("owner alice has 3 unfinished jobs"), std::string::npos)
      << status.error_message();
  EXPECT_TRUE(submit("bob", &response).ok());
  grpc::ClientContext cancel_context;
  cancel_context.AddMetadata("authorization", "Bearer alice-secret");
  v1::CancelJobRequest cancel;
  cancel.set_id(ids[0]);
  v1::Job cancelled;
  ASSERT_TRUE(stub->CancelJob(&cancel_context, cancel, &cancelled).ok());
  EXPECT_TRUE(submit("alice", &response).ok());
}

// A worker whose stream is cancelled while its registration is being handled has no read
// left to fail: it used to stay attached (and be given jobs) until its heartbeats were
// missed. Each one goes as its stream ends.
TEST(GrpcApi, AWorkerWhoseStreamEndsAsItRegistersIsNotLeftAttached) {
  InProcessCoordinator::Options options;
  options.heartbeat_timeout = absl::Minutes(5);
  InProcessCoordinator coordinator(options);
  auto stub = coordinator.WorkerStub();
  for (int round = 0; round < 5; ++round) {
    std::vector<std::unique_ptr<FakeWorkerStream>> workers;
    for (int i = 0; i < 100; ++i) {
      auto w = std::make_unique<FakeWorkerStream>();
      w->stream = stub->Attach(&w->context);
      v1::WorkerMessage reg;
      reg.mutable_register_()->set_worker_id("w" + std::to_string(i));
      reg.mutable_register_()->mutable_device()->set_type(v1::DEVICE_TYPE_CPU);
      w->stream->Write(reg);
      w->context.TryCancel();
      workers.push_back(std::move(w));
    }
    for (auto& w : workers) w->stream->Finish();
    ASSERT_TRUE(
        testing::WaitFor([&] { return coordinator.core().GetCluster().workers_size() == 0; },
                         std::chrono::seconds(10)))
        << coordinator.core().GetCluster().workers_size() << " workers left attached";
  }
}

}  // namespace
}  // namespace stoke::server

namespace stoke::server {
namespace {

v1::SubmitJobRequest PythonRequest(const std::string& content) {
  v1::SubmitJobRequest request;
  *request.mutable_spec() = SyntheticSpec("own-model");
  request.mutable_spec()->mutable_model()->mutable_python()->set_file("/home/me/model.py");
  auto* file = request.mutable_code()->add_files();
  file->set_path("model.py");
  file->set_content(content);
  return request;
}

// A Python model's code is checked, stored once by its digest however many jobs send it,
// and named in each job's spec; what is not code, or is not safe to write, is refused
// naming the field and stores nothing.
TEST(GrpcApi, PythonModelCodeIsCheckedStoredOnceAndNamedInTheSpec) {
  InProcessCoordinator coordinator;
  auto stub = coordinator.Stub();
  std::vector<v1::Job> jobs;
  for (int i = 0; i < 2; ++i) {
    grpc::ClientContext context;
    v1::SubmitJobResponse response;
    const grpc::Status status =
        stub->SubmitJob(&context, PythonRequest("def build_model(): ...\n"), &response);
    ASSERT_TRUE(status.ok()) << status.error_message();
    jobs.push_back(response.job());
  }
  const auto& python = jobs[0].spec().model().python();
  EXPECT_EQ(python.module(), "model");
  EXPECT_EQ(python.factory(), "build_model");
  EXPECT_EQ(python.loss(), v1::LOSS_CROSS_ENTROPY);
  EXPECT_EQ(jobs[0].spec().training().compile(), v1::COMPILE_AUTO);
  EXPECT_EQ(python.code_sha256(), jobs[1].spec().model().python().code_sha256());
  auto stored = coordinator.store().GetCode(python.code_sha256());
  ASSERT_TRUE(stored.ok()) << stored.status();
  v1::CodeBundle bundle;
  ASSERT_TRUE(bundle.ParseFromString(*stored));
  EXPECT_EQ(bundle.files(0).content(), "def build_model(): ...\n");

  const auto refused = [&](const v1::SubmitJobRequest& request, const std::string& names) {
    grpc::ClientContext context;
    v1::SubmitJobResponse response;
    const grpc::Status status = stub->SubmitJob(&context, request, &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << names;
    EXPECT_NE(status.error_message().find(names), std::string::npos) << status.error_message();
  };
  auto escaping = PythonRequest("x");
  escaping.mutable_code()->mutable_files(0)->set_path("../../etc/cron.d/x.py");
  refused(escaping, "spec.model.python.file");
  auto no_code = PythonRequest("x");
  no_code.clear_code();
  refused(no_code, "no code was sent");
  auto stray = PythonRequest("x");
  *stray.mutable_spec() = SyntheticSpec("mlp");
  refused(stray, "code: sent with a job that is neither model.python nor a command");
  auto unimportable = PythonRequest("x");
  unimportable.mutable_code()->mutable_files(0)->set_path("my-model.py");
  refused(unimportable, "cannot be imported");
  auto compile_builtin = PythonRequest("x");
  *compile_builtin.mutable_spec() = SyntheticSpec("mlp");
  compile_builtin.clear_code();
  compile_builtin.mutable_spec()->mutable_training()->set_compile(v1::COMPILE_ON);
  refused(compile_builtin, "training.compile: applies to model.python only");
  // None of them was stored.
  grpc::ClientContext list_context;
  v1::ListJobsResponse listed;
  ASSERT_TRUE(stub->ListJobs(&list_context, v1::ListJobsRequest(), &listed).ok());
  EXPECT_EQ(listed.jobs_size(), 2);
}

}  // namespace
}  // namespace stoke::server
