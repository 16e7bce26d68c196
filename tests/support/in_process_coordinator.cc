#include "tests/support/in_process_coordinator.h"

#include <gtest/gtest.h>

#include "spec/job_spec_rules.h"

namespace stoke::testing {

InProcessCoordinator::InProcessCoordinator(Options options) {
  store_ = *server::SqliteJobStore::Open({dir_.File("stoke.db")});
  hub_ = std::make_unique<server::EventHub>(*store_);
  server::Coordinator::Options core_options;
  core_options.jobs_dir = dir_.File("jobs");
  core_options.tick_interval = options.tick_interval;
  core_options.heartbeat_timeout = options.heartbeat_timeout;
  core_options.max_unfinished_jobs_per_owner = options.max_unfinished_jobs_per_owner;
  core_options.quotas = options.quotas;
  core_ = *server::Coordinator::Create(core_options, *store_, *hub_, clock_);
  EXPECT_TRUE(core_->Start().ok());
  executor_ = std::make_unique<server::Executor>(options.executor_threads);
  read_executor_ = std::make_unique<server::Executor>(options.executor_threads);
  access_ = std::make_unique<server::AccessControl>(
      server::AccessControl::Options{std::move(options.tokens), false, security::Role::kSubmitter,
                                     options.max_submitter_priority});
  audit_ = std::make_unique<server::AuditLog>(*store_, clock_);
  coordinator_service_ = std::make_unique<server::CoordinatorService>(
      *core_, *hub_, *executor_, *read_executor_, spec::DataRoots(options.data_roots), *access_,
      *audit_);
  coordinator_service_->LimitWatchStreams(options.max_watch_streams_per_caller);
  link_service_ =
      std::make_unique<server::WorkerLinkService>(*core_, *executor_, *access_, *audit_);
  metrics_ = *server::CoordinatorMetrics::Start({}, nullptr);
  server::GrpcServer::Options server_options;
  server_options.address = "127.0.0.1:0";
  server_options.observer = metrics_.get();
  server_ =
      *server::GrpcServer::Start(server_options, {coordinator_service_.get(), link_service_.get()});
}

InProcessCoordinator::~InProcessCoordinator() {
  core_->BeginShutdown();
  server_->Shutdown(std::chrono::milliseconds(500));
  executor_->Stop();
  read_executor_->Stop();
  core_->Stop();
}

std::unique_ptr<v1::Coordinator::Stub> InProcessCoordinator::Stub() const {
  return v1::Coordinator::NewStub(
      grpc::CreateChannel(address(), grpc::InsecureChannelCredentials()));
}

std::unique_ptr<v1::WorkerLink::Stub> InProcessCoordinator::WorkerStub() const {
  return v1::WorkerLink::NewStub(
      grpc::CreateChannel(address(), grpc::InsecureChannelCredentials()));
}

std::string InProcessCoordinator::Submit() {
  v1::JobSpec spec;
  spec.mutable_model()->mutable_mlp();
  spec.mutable_data()->mutable_synthetic();
  spec.mutable_training()->set_steps(10);
  spec.mutable_resources()->set_gpus(1);
  spec.set_max_restarts(100);
  EXPECT_TRUE(spec::ValidateJobSpec(spec).ok());
  spec::ApplyJobSpecDefaults(spec, *spec::InspectData(spec, spec::DataRoots({})));
  auto job = core_->SubmitJob(spec);
  EXPECT_TRUE(job.ok()) << job.status();
  return job.ok() ? job->id() : "";
}

}  // namespace stoke::testing
