// A whole coordinator in the test's process: the real core over a SQLite store in a temp
// folder, its gRPC services on a loopback port, metrics and access control as
// stoke-coordinator wires them. For tests that speak the gRPC API (or the worker link)
// from outside and then look inside (the store, the core) at what it did.
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <vector>

#include "server/api/access_control.h"
#include "server/api/audit_log.h"
#include "server/api/coordinator_service.h"
#include "server/api/executor.h"
#include "server/api/grpc_server.h"
#include "server/api/worker_link_service.h"
#include "server/core/clock.h"
#include "server/core/coordinator.h"
#include "server/metrics/coordinator_metrics.h"
#include "server/store/sqlite_job_store.h"
#include "stoke/v1/coordinator.grpc.pb.h"
#include "stoke/v1/worker_link.grpc.pb.h"
#include "tests/support/temp_dir.h"

namespace stoke::testing {

class InProcessCoordinator {
 public:
  struct Options {
    std::vector<std::string> data_roots;
    // Empty: every caller is an anonymous admin, as on a loopback quickstart.
    std::vector<security::TokenEntry> tokens;
    int executor_threads = 4;
    absl::Duration heartbeat_timeout = absl::Seconds(15);
    absl::Duration tick_interval = absl::Milliseconds(50);
    size_t max_unfinished_jobs_per_owner = 500;
    std::optional<int32_t> max_submitter_priority;
    server::Quotas quotas;
    size_t max_watch_streams_per_caller = server::CoordinatorService::kDefaultWatchStreamsPerCaller;
  };

  InProcessCoordinator() : InProcessCoordinator(Options{}) {}
  explicit InProcessCoordinator(Options options);
  ~InProcessCoordinator();
  InProcessCoordinator(const InProcessCoordinator&) = delete;
  InProcessCoordinator& operator=(const InProcessCoordinator&) = delete;

  server::Coordinator& core() { return *core_; }
  server::JobStore& store() { return *store_; }
  server::CoordinatorMetrics& metrics() { return *metrics_; }
  const std::string& address() const { return server_->address(); }
  const TempDir& dir() const { return dir_; }

  std::unique_ptr<v1::Coordinator::Stub> Stub() const;
  std::unique_ptr<v1::WorkerLink::Stub> WorkerStub() const;

  // Submits a small valid job (an MLP on synthetic data) through the core; its id.
  std::string Submit();

 private:
  TempDir dir_;
  server::RealClock clock_;
  std::unique_ptr<server::SqliteJobStore> store_;
  std::unique_ptr<server::EventHub> hub_;
  std::unique_ptr<server::Coordinator> core_;
  std::unique_ptr<server::Executor> executor_;
  std::unique_ptr<server::Executor> read_executor_;
  std::unique_ptr<server::AccessControl> access_;
  std::unique_ptr<server::AuditLog> audit_;
  std::unique_ptr<server::CoordinatorService> coordinator_service_;
  std::unique_ptr<server::WorkerLinkService> link_service_;
  std::unique_ptr<server::CoordinatorMetrics> metrics_;
  std::unique_ptr<server::GrpcServer> server_;
};

}  // namespace stoke::testing
