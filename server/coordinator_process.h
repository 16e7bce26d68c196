// One run of stoke-coordinator, from its parsed flags to its exit status. Run() takes the
// steps of start-up in order (each a method below: check the flags, open the store, start
// /metrics, wait as a standby, start the core, serve gRPC, launch the local workers), waits
// for SIGINT or SIGTERM, and takes the process down in order: network first, core last.
// What the steps make are members, declared in the order in which they must go when a
// step fails half way (the reverse one): the server before the services it calls, the
// services before the core, /metrics after the server that reports to it but before the
// core it reads.
#pragma once

#include <signal.h>

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "security/auth_tokens.h"
#include "server/api/access_control.h"
#include "server/api/audit_log.h"
#include "server/api/coordinator_service.h"
#include "server/api/executor.h"
#include "server/api/grpc_server.h"
#include "server/api/listener_watch.h"
#include "server/api/worker_link_service.h"
#include "server/coordinator_flags.h"
#include "server/core/clock.h"
#include "server/core/coordinator.h"
#include "server/core/event_hub.h"
#include "server/core/free_heap_returner.h"
#include "server/core/local_workers.h"
#include "server/metrics/coordinator_metrics.h"
#include "server/store/job_store.h"
#include "server/store/postgres_job_store.h"
#include "server/store/store_marker.h"
#include "spec/data_checks.h"

namespace stoke::server {

class CoordinatorProcess {
 public:
  explicit CoordinatorProcess(CoordinatorFlags flags);
  ~CoordinatorProcess();
  CoordinatorProcess(const CoordinatorProcess&) = delete;
  CoordinatorProcess& operator=(const CoordinatorProcess&) = delete;

  // Serves until SIGINT or SIGTERM, or does the one thing --backup or --stop-workers
  // asks; returns the exit status. A listener that stalled makes it start this program
  // again, as `argv`, on the same address (then it does not return).
  int Run(char** argv);

 private:
  // A step of start-up either goes on (nullopt) or ends the run with this exit status.
  using Exit = std::optional<int>;

  // Sent to itself when the listener stalls: stop as for SIGTERM, then start again, on
  // the address this variable passes to the new process.
  static constexpr int kRestartSignal = SIGUSR2;
  static constexpr const char* kRestartAddressVariable = "STOKE_RESTART_ADDRESS";

  void PrepareProcess();
  int Backup();
  int StopLeftWorkers();
  Exit CheckSecurity();
  Exit ReadTokens();
  Exit PrepareDataDir();
  Exit OpenStore();
  Exit StartMetrics();
  Exit WaitForLeadership();
  Exit StartCore();
  Exit BuildCoreOptions();
  Exit IssueLocalWorkerToken();
  Exit StartServing();
  Exit WatchListener();
  Exit SuperviseLocalWorkers();
  void StartMarkerUpdates();
  int WaitForStopSignal();
  void ReloadTokens();
  void Shutdown(int sig);
  void DrainAndStopServing();
  void ReleaseLocalWorkers();
  void StopMarkerUpdates();
  int StartAgain(char** argv);

  CoordinatorFlags flags_;
  // SIGINT, SIGTERM, SIGHUP and the restart signal: blocked in every thread, taken by
  // Run's sigwait alone.
  sigset_t stop_signals_{};
  std::optional<FreeHeapReturner> heap_returner_;
  std::unique_ptr<JobStore> store_;
  // Set when the store is PostgreSQL, shared with standbys: this process leads first.
  PostgresJobStore* shared_store_ = nullptr;
  // SQLite's file can be emptied behind the coordinator's back; the marker notices.
  std::optional<StoreMarker> marker_;
  // What /metrics reads: null until the core serves (snapshots are empty until then).
  std::atomic<Coordinator*> serving_{nullptr};
  std::unique_ptr<EventHub> hub_;
  RealClock clock_;
  std::optional<spec::DataRoots> data_roots_;
  std::unique_ptr<Coordinator> core_;
  std::unique_ptr<CoordinatorMetrics> metrics_;
  std::unique_ptr<Executor> executor_;
  // Reads apart: they must not queue behind calls that wait for a transition's disk sync.
  std::unique_ptr<Executor> read_executor_;
  std::string local_join_token_path_;
  std::optional<security::TokenEntry> local_workers_token_;
  std::unique_ptr<AccessControl> access_;
  std::unique_ptr<AuditLog> audit_;
  std::unique_ptr<CoordinatorService> coordinator_service_;
  std::unique_ptr<WorkerLinkService> worker_link_service_;
  std::unique_ptr<GrpcServer> server_;
  // Set by the listener watch before it sends the restart signal.
  std::atomic<bool> restart_{false};
  std::unique_ptr<ListenerWatch> watch_;
  std::unique_ptr<LocalWorkerSupervisor> supervisor_;
  std::atomic<bool> marking_{false};
  std::thread marker_updates_;
};

}  // namespace stoke::server
