#include "server/coordinator_process.h"

#include <spdlog/fmt/ranges.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "security/credential_file.h"
#include "security/grpc_credentials.h"
#include "security/token_hash.h"
#include "server/data_dir_files.h"
#include "server/service_notify.h"
#include "server/standby.h"
#include "server/store/open_store.h"
#include "server/store/sqlite_job_store.h"

namespace fs = std::filesystem;

namespace stoke::server {
namespace {

int Fail(const absl::Status& status) {
  spdlog::critical("{}", std::string{status.message()});
  return 1;
}

// Every descriptor the system allows this process: the gRPC listener must never run out
// (gRPC 1.51 stops accepting for good after one accept4() fails with EMFILE).
void RaiseFileLimit() {
  rlimit limit;
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur >= limit.rlim_max) return;
  const rlim_t was = limit.rlim_cur;
  limit.rlim_cur = limit.rlim_max;
  if (setrlimit(RLIMIT_NOFILE, &limit) == 0) {
    spdlog::info("open files: limit raised from {} to {}", was, limit.rlim_cur);
  }
}

// Local workers dial the coordinator over loopback when it listens on every interface.
std::string LocalDialAddress(const std::string& listen) {
  const auto colon = listen.rfind(':');
  const std::string host = listen.substr(0, colon);
  if (host == "0.0.0.0" || host == "[::]" || host == "::" || host.empty()) {
    return "127.0.0.1" + listen.substr(colon);
  }
  return listen;
}

// --auth-tokens' file, refused when it holds no token.
absl::StatusOr<std::vector<security::TokenEntry>> ReadNonEmptyTokenFile(const std::string& path) {
  auto tokens = security::ReadTokenFile(path);
  if (tokens.ok() && tokens->empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--auth-tokens ", path,
                     ": holds no token; add lines with `stoke token create NAME --role R`"));
  }
  return tokens;
}

}  // namespace

CoordinatorProcess::CoordinatorProcess(CoordinatorFlags flags) : flags_(std::move(flags)) {}

CoordinatorProcess::~CoordinatorProcess() { StopMarkerUpdates(); }

int CoordinatorProcess::Run(char** argv) {
  PrepareProcess();
  if (!flags_.backup_path.empty()) return Backup();
  if (flags_.stop_workers) return StopLeftWorkers();
  if (const Exit exit = CheckSecurity()) return *exit;
  if (const Exit exit = ReadTokens()) return *exit;
  if (const Exit exit = PrepareDataDir()) return *exit;
  if (const Exit exit = OpenStore()) return *exit;
  if (const Exit exit = StartMetrics()) return *exit;
  if (const Exit exit = WaitForLeadership()) return *exit;
  if (const Exit exit = StartCore()) return *exit;
  if (const Exit exit = IssueLocalWorkerToken()) return *exit;
  if (const Exit exit = StartServing()) return *exit;
  if (const Exit exit = SuperviseLocalWorkers()) return *exit;
  // systemd (Type=notify): units ordered after this one start once it takes calls.
  NotifyServiceManager(absl::StrCat("READY=1\nSTATUS=serving on ", server_->address()));
  StartMarkerUpdates();
  Shutdown(WaitForStopSignal());
  if (restart_) return StartAgain(argv);
  spdlog::info("stopped");
  return 0;
}

void CoordinatorProcess::PrepareProcess() {
  // Blocked in every thread, so main alone takes them (sigwait): before anything starts a
  // thread (gRPC does as soon as credentials are made), or such a thread would be killed
  // by a signal that arrives while main is busy (a standby waiting for the lease).
  sigemptyset(&stop_signals_);
  sigaddset(&stop_signals_, SIGINT);
  sigaddset(&stop_signals_, SIGTERM);
  sigaddset(&stop_signals_, kRestartSignal);
  sigaddset(&stop_signals_, SIGHUP);  // read --auth-tokens again
  pthread_sigmask(SIG_BLOCK, &stop_signals_, nullptr);
  // The address a restart of this process (after its listener stalled) keeps.
  if (const char* kept = std::getenv(kRestartAddressVariable)) {
    flags_.server.address = kept;
    unsetenv(kRestartAddressVariable);
  }
  RaiseFileLimit();
  signal(SIGPIPE, SIG_IGN);
  heap_returner_.emplace();
  spec::ApplyLogFlags(flags_.log);
}

// --backup: a consistent copy of the SQLite store, safe beside a running coordinator.
int CoordinatorProcess::Backup() {
  if (!flags_.store_url.empty()) {
    return Fail(absl::InvalidArgumentError(
        "--backup copies the SQLite store; back up a PostgreSQL store (--store) with pg_dump"));
  }
  const std::string db = flags_.data_dir + "/stoke.db";
  if (!fs::exists(db)) {
    return Fail(absl::NotFoundError(absl::StrCat("--backup: no job store at ", db)));
  }
  auto store = SqliteJobStore::Open({db});
  if (!store.ok()) return Fail(store.status());
  if (auto s = (*store)->BackupTo(flags_.backup_path); !s.ok()) return Fail(s);
  spdlog::info("job store {} copied to {}", db, flags_.backup_path);
  return 0;
}

// --stop-workers: the local workers an earlier coordinator left training.
int CoordinatorProcess::StopLeftWorkers() {
  const std::string& data_dir = flags_.data_dir;
  const size_t stopped =
      LocalWorkerSupervisor::StopLeftWorkers(data_dir + "/workers", absl::Seconds(10));
  spdlog::info("stopped {} local worker{} left running on {}", stopped, stopped == 1 ? "" : "s",
               data_dir);
  return 0;
}

CoordinatorProcess::Exit CoordinatorProcess::CheckSecurity() {
  if (auto s = CheckSecurityFlags(flags_); !s.ok()) return Fail(s);
  for (const auto& [path, flag] : {std::pair{flags_.tls.key_path, "--tls-key"},
                                   std::pair{flags_.metrics_token_path, "--metrics-token"}}) {
    if (const std::string warning = security::ExposedSecretWarning(path, flag); !warning.empty()) {
      spdlog::warn("{}", warning);
    }
  }
  auto credentials = security::MakeServerCredentials(flags_.tls);
  if (!credentials.ok()) return Fail(credentials.status());
  flags_.server.credentials = *credentials;
  return std::nullopt;
}

// The files of secrets the flags name: --auth-tokens and --metrics-token.
CoordinatorProcess::Exit CoordinatorProcess::ReadTokens() {
  if (!flags_.auth_tokens_path.empty()) {
    auto tokens = ReadNonEmptyTokenFile(flags_.auth_tokens_path);
    if (!tokens.ok()) return Fail(tokens.status());
    flags_.access.tokens = *std::move(tokens);
  }
  if (!flags_.metrics_token_path.empty()) {
    auto token = security::ReadTokenFromFile(flags_.metrics_token_path, "--metrics-token");
    if (!token.ok()) return Fail(token.status());
    flags_.metrics.token = *token;
  }
  return std::nullopt;
}

CoordinatorProcess::Exit CoordinatorProcess::PrepareDataDir() {
  std::string& data_dir = flags_.data_dir;
  std::error_code ec;
  for (const char* sub : {"", "/jobs", "/logs", "/datasets", "/workers"}) {
    fs::create_directories(data_dir + sub, ec);
    if (ec) {
      return Fail(absl::UnavailableError(absl::StrCat("--data-dir ", data_dir, ": cannot create ",
                                                      data_dir, sub, ": ", ec.message())));
    }
  }
  data_dir = fs::canonical(data_dir).string();
  return std::nullopt;
}

CoordinatorProcess::Exit CoordinatorProcess::OpenStore() {
  auto opened = OpenJobStore(flags_.store_url, flags_.data_dir);
  if (!opened.ok()) return Fail(opened.status());
  store_ = std::move(opened->store);
  shared_store_ = opened->shared;
  // A PostgreSQL store is shared by several coordinators and kept by its own server.
  if (shared_store_ == nullptr) {
    marker_.emplace(flags_.data_dir + "/store.marker", flags_.data_dir + "/stoke.db");
    if (auto s = marker_->Check(*store_); !s.ok()) return Fail(s);
    if (auto s = marker_->Update(*store_); !s.ok()) return Fail(s);
  }
  return std::nullopt;
}

// Before the gRPC server, which reports every call to it, and before waiting as a
// standby, so that Prometheus sees a standby up (stoke_coordinator_leader 0). Until the
// core serves, snapshots are empty.
CoordinatorProcess::Exit CoordinatorProcess::StartMetrics() {
  if (flags_.metrics.address.empty()) return std::nullopt;
  flags_.metrics.leader = shared_store_ == nullptr;
  auto started = CoordinatorMetrics::Start(flags_.metrics, [this] {
    Coordinator* c = serving_.load();
    return c == nullptr ? MetricsSnapshot{} : MetricsSnapshot{c->GetCluster(), c->ActiveJobs()};
  });
  if (!started.ok()) return Fail(started.status());
  metrics_ = *std::move(started);
  spdlog::info("Prometheus metrics on http://{}/metrics", metrics_->address());
  if (auto s = WriteAtomically(flags_.data_dir + "/metrics.address", metrics_->address() + "\n");
      !s.ok()) {
    return Fail(s);
  }
  return std::nullopt;
}

// A coordinator on a shared store serves only once it holds the leader lease.
CoordinatorProcess::Exit CoordinatorProcess::WaitForLeadership() {
  if (shared_store_ == nullptr) return std::nullopt;
  spdlog::info("job store: PostgreSQL at {}", RedactedStoreUrl(flags_.store_url));
  std::thread lease_watch;
  // A standby may wait for the lease for ever: to systemd it is up (started, not
  // failed), and says what it waits for.
  NotifyServiceManager("READY=1\nSTATUS=standby: waiting for the leader's lease");
  if (auto s = LeadBeforeServing(*shared_store_, stop_signals_, &lease_watch); !s.ok()) {
    if (s.code() != absl::StatusCode::kCancelled) return Fail(s);
    spdlog::info("stopped while standby");
    metrics_.reset();
    std::error_code ec;
    fs::remove(flags_.data_dir + "/metrics.address", ec);
    return 0;
  }
  if (metrics_) metrics_->SetLeader(true);
  return std::nullopt;
}

CoordinatorProcess::Exit CoordinatorProcess::StartCore() {
  hub_ = std::make_unique<EventHub>(*store_);
  if (const Exit exit = BuildCoreOptions()) return exit;
  auto core = Coordinator::Create(flags_.core, *store_, *hub_, clock_);
  if (!core.ok()) return Fail(core.status());
  core_ = *std::move(core);
  if (auto s = core_->Start(); !s.ok()) return Fail(s);
  serving_.store(core_.get());
  spdlog::info("jobs may read data under: {}", fmt::join(data_roots_->roots(), ", "));
  return std::nullopt;
}

// What the flags left for the core's options to be completed with at start: its folders,
// the rendezvous ports, the quotas file and the data roots.
CoordinatorProcess::Exit CoordinatorProcess::BuildCoreOptions() {
  Coordinator::Options& core = flags_.core;
  core.jobs_dir = flags_.data_dir + "/jobs";
  if (!ParseRendezvousPorts(flags_.rendezvous_ports, &core)) {
    std::fprintf(stderr,
                 "stoke-coordinator: --rendezvous-ports %s: expected FIRST-LAST, ports from "
                 "1024 to 65535\n",
                 flags_.rendezvous_ports.c_str());
    return 2;
  }
  if (!flags_.quotas_path.empty()) {
    auto quotas = Quotas::Read(flags_.quotas_path);
    if (!quotas.ok()) return Fail(quotas.status());
    core.quotas = *std::move(quotas);
  }
  std::vector<std::string>& roots = flags_.data_roots;
  if (roots.empty()) roots = {"/usr/share/datasets", flags_.data_dir + "/datasets"};
  data_roots_.emplace(roots);
  core.data_roots = data_roots_->roots();
  return std::nullopt;
}

// Local workers join with a token of their own, known only to the coordinators on this
// data dir and the workers they launch (through a file only its user can read). It is
// kept across restarts: workers left training by the previous coordinator reattach with
// it.
CoordinatorProcess::Exit CoordinatorProcess::IssueLocalWorkerToken() {
  if (flags_.access.tokens.empty() || flags_.local_workers == "0") return std::nullopt;
  local_join_token_path_ = flags_.data_dir + "/local-worker.token";
  auto token = LocalWorkerToken(local_join_token_path_);
  if (!token.ok()) return Fail(token.status());
  local_workers_token_ = {"local-workers", security::Role::kWorker, security::HashToken(*token)};
  flags_.access.tokens.push_back(*local_workers_token_);
  return std::nullopt;
}

CoordinatorProcess::Exit CoordinatorProcess::StartServing() {
  executor_ = std::make_unique<Executor>(4);
  read_executor_ = std::make_unique<Executor>(4);
  access_ = std::make_unique<AccessControl>(std::move(flags_.access));
  audit_ = std::make_unique<AuditLog>(*store_, clock_, flags_.audit_max_entries);
  coordinator_service_ = std::make_unique<CoordinatorService>(
      *core_, *hub_, *executor_, *read_executor_, *std::move(data_roots_), *access_, *audit_);
  coordinator_service_->LimitWatchStreams(flags_.max_watch_streams);
  worker_link_service_ = std::make_unique<WorkerLinkService>(*core_, *executor_, *access_, *audit_);
  flags_.server.observer = metrics_.get();
  auto server =
      GrpcServer::Start(flags_.server, {coordinator_service_.get(), worker_link_service_.get()});
  if (!server.ok()) return Fail(server.status());
  server_ = *std::move(server);
  if (const Exit exit = WatchListener()) return exit;
  spdlog::info("stoke-coordinator {} listening on {} ({}, {}), data in {}", STOKE_VERSION,
               server_->address(), flags_.tls.cert_path.empty() ? "plaintext" : "TLS",
               access_->enabled() ? "tokens required" : "no authentication", flags_.data_dir);
  // Tools and tests that start us on port 0 read the real address here.
  if (auto s = WriteAtomically(flags_.data_dir + "/coordinator.address", server_->address() + "\n");
      !s.ok()) {
    return Fail(s);
  }
  return std::nullopt;
}

// A listener that stops accepting (see listener_watch.h) is recovered by starting this
// coordinator again on the same address: workers ride through a restart. The watch probes
// TCP listeners. A unix socket only its owner's processes may connect to (its mode is the
// umask's), so only they could exhaust its descriptors.
CoordinatorProcess::Exit CoordinatorProcess::WatchListener() {
  if (absl::StartsWith(server_->address(), "unix:")) return std::nullopt;
  ListenerWatch::Options watch_options;
  watch_options.address = server_->address();
  auto created = ListenerWatch::Create(watch_options, [this] {
    restart_ = true;
    kill(getpid(), kRestartSignal);
  });
  if (!created.ok()) return Fail(created.status());
  watch_ = *std::move(created);
  watch_->Start();
  return std::nullopt;
}

CoordinatorProcess::Exit CoordinatorProcess::SuperviseLocalWorkers() {
  auto plan = PlanLocalWorkers(flags_.local_workers, flags_.worker_binary);
  if (!plan.ok()) return Fail(plan.status());
  if (plan->empty()) return std::nullopt;
  const std::string& data_dir = flags_.data_dir;
  LocalWorkerSupervisor::Options options;
  options.worker_binary = flags_.worker_binary;
  options.coordinator_address = LocalDialAddress(server_->address());
  options.workers = *plan;
  options.log_dir = data_dir + "/logs";
  options.state_dir = data_dir + "/workers";
  options.address_file = data_dir + "/coordinator.address";
  options.join_token_file = local_join_token_path_;
  // Local workers verify the coordinator with $STOKE_TLS_CA when set (they inherit our
  // environment), else with the certificate itself (self-signed deployments).
  if (!flags_.tls.cert_path.empty() && std::getenv("STOKE_TLS_CA") == nullptr) {
    options.tls_ca = flags_.tls.cert_path;
  }
  // Local workers contain user code (stoke-worker's --sandbox is on by default); as root,
  // one table of owners' uids for the host's local workers, beside the jobs whose folders
  // it owns.
  options.worker_flags = {"--job-users-table", data_dir + "/job-users"};
  if (!flags_.local_job_users.empty()) {
    options.worker_flags.insert(options.worker_flags.end(),
                                {"--job-users", flags_.local_job_users});
  }
  options.worker_flags.insert(options.worker_flags.end(), flags_.local_worker_flags.begin(),
                              flags_.local_worker_flags.end());
  auto created = LocalWorkerSupervisor::Create(options);
  if (!created.ok()) return Fail(created.status());
  supervisor_ = *std::move(created);
  if (auto s = supervisor_->Start(); !s.ok()) return Fail(s);
  return std::nullopt;
}

}  // namespace stoke::server
