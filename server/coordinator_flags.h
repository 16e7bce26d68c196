// stoke-coordinator's flags: what its command line, its --config file and its
// STOKE_COORDINATOR_* variables may set. Each component the coordinator wires keeps its
// own options struct here, and a flag of one of their fields takes the field's in-class
// default as its own (the one --help shows): a default is written once, beside what it
// configures. The other fields are the process's own: its modes, the files it reads at
// start, and the settings it checks before anything starts.
#pragma once

#include <CLI/CLI.hpp>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "security/grpc_credentials.h"
#include "server/api/access_control.h"
#include "server/api/coordinator_service.h"
#include "server/api/grpc_server.h"
#include "server/core/coordinator.h"
#include "server/metrics/coordinator_metrics.h"
#include "spec/log_setup.h"

namespace stoke::server {

// $STOKE_DATA_DIR, else ~/.stoke, else .stoke.
std::string DefaultDataDir();
// The stoke-worker beside this program, else the one on PATH.
std::string DefaultWorkerBinary();
// /metrics at its well-known address; CoordinatorMetrics' own default (none) is for tests.
CoordinatorMetrics::Options DefaultMetricsOptions();
// The core's rendezvous ports as --rendezvous-ports writes them, FIRST-LAST.
std::string RendezvousPortsText(const Coordinator::Options& core);

struct CoordinatorFlags {
  // The components' options.
  GrpcServer::Options server;  // --address
  // --heartbeat-timeout, --start-timeout, --max-jobs-per-owner, --min-checkpoint-seconds,
  // --max-job-bytes-per-owner, --backfill-window, --preemption-grace,
  // --fair-share-half-life-hours, --starvation-minutes.
  Coordinator::Options core;
  CoordinatorMetrics::Options metrics = DefaultMetricsOptions();  // --metrics-*
  // --require-worker-cert, --python-models, --max-priority (the tokens are read at start).
  AccessControl::Options access;
  security::ServerTlsOptions tls;  // --tls-cert, --tls-key, --client-ca
  spec::LogFlags log;              // --log-level, --log-format
  // WatchJob streams one caller may hold open at once (CoordinatorService's default).
  size_t max_watch_streams = CoordinatorService::kDefaultWatchStreamsPerCaller;
  // Audit entries the store keeps (AuditLog's own default keeps all).
  uint64_t audit_max_entries = 1'000'000;

  // Where and with what the process runs.
  std::string data_dir = DefaultDataDir();
  std::string store_url;  // --store: PostgreSQL instead of SQLite in data_dir
  std::string local_workers = "auto";
  // --job-users for the local workers: each owner's code as a uid of its own.
  std::string local_job_users;
  // More flags for every local worker, each as given (--local-worker-flag=--job-pids=256).
  std::vector<std::string> local_worker_flags;
  std::string worker_binary = DefaultWorkerBinary();
  // FIRST-LAST, checked when the core is built (into core's two rendezvous ports).
  std::string rendezvous_ports = RendezvousPortsText(core);
  std::string quotas_path;              // read into core.quotas at start
  std::vector<std::string> data_roots;  // empty: /usr/share/datasets and DATA_DIR/datasets
  std::string auth_tokens_path;         // read into access.tokens at start, and on SIGHUP
  std::string metrics_token_path;       // read into metrics.token at start
  bool insecure = false;

  // How it stops, and the modes that do one thing and exit instead of serving.
  double drain_seconds = 0;
  bool stop_workers_on_exit = false;
  bool stop_workers = false;  // --stop-workers
  std::string backup_path;    // --backup
};

// Adds every flag of stoke-coordinator to `app`, writing into `flags` (whose fields, as
// they are when this is called, are the defaults --help shows).
void AddCoordinatorFlags(CLI::App& app, CoordinatorFlags* flags);

// The security settings, checked before anything starts (a typo must not leave an open
// coordinator running): FAILED_PRECONDITION for an address reachable from other hosts
// without TLS, tokens, or a /metrics token, unless --insecure; INVALID_ARGUMENT for
// --require-worker-cert without --client-ca.
absl::Status CheckSecurityFlags(const CoordinatorFlags& flags);

// --max-priority's "submitter=N".
absl::StatusOr<int32_t> ParseMaxPriority(const std::string& value);

// FIRST-LAST of --rendezvous-ports into the core's options; false when it is not two
// ports from 1024 to 65535 in order.
bool ParseRendezvousPorts(const std::string& text, Coordinator::Options* core);

}  // namespace stoke::server
