// stoke-coordinator: wires the job store, the core, the gRPC services, /metrics and the
// local workers together, then waits for SIGINT or SIGTERM and takes them down in order:
// network first, core last.
#include <fcntl.h>
#include <signal.h>
#include <spdlog/fmt/ranges.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "security/auth_tokens.h"
#include "security/credential_file.h"
#include "security/grpc_credentials.h"
#include "security/token_hash.h"
#include "server/api/access_control.h"
#include "server/api/audit_log.h"
#include "server/api/coordinator_service.h"
#include "server/api/executor.h"
#include "server/api/grpc_server.h"
#include "server/api/listener_watch.h"
#include "server/api/worker_link_service.h"
#include "server/core/coordinator.h"
#include "server/core/free_heap_returner.h"
#include "server/core/local_workers.h"
#include "server/metrics/coordinator_metrics.h"
#include "server/service_notify.h"
#include "server/standby.h"
#include "server/store/open_store.h"
#include "server/store/sqlite_job_store.h"
#include "server/store/store_marker.h"
#include "spec/flag_sources.h"
#include "spec/log_setup.h"

namespace fs = std::filesystem;
using namespace stoke::server;
namespace security = stoke::security;

namespace {

// Tools and scripts poll for these files: they must never see one half written, and a
// coordinator that cannot write them (a full disk) says so rather than leave them waiting.
absl::Status WriteAtomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  std::ofstream out(tmp, std::ios::trunc);
  out << text;
  out.close();
  if (!out) {
    const std::string cause = std::strerror(errno);
    std::remove(tmp.c_str());
    return absl::UnavailableError(absl::StrCat(path, ": cannot write: ", cause));
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) {
    std::remove(tmp.c_str());  // no half-done file left beside the real one
    return absl::UnavailableError(absl::StrCat(path, ": cannot write: ", ec.message()));
  }
  return absl::OkStatus();
}

std::string DefaultDataDir() {
  if (const char* env = std::getenv("STOKE_DATA_DIR")) return env;
  if (const char* home = std::getenv("HOME")) return std::string(home) + "/.stoke";
  return ".stoke";
}

std::string DefaultWorkerBinary() {
  std::error_code ec;
  fs::path self = fs::read_symlink("/proc/self/exe", ec);
  return ec ? "stoke-worker" : (self.parent_path() / "stoke-worker").string();
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

int Fail(const absl::Status& status) {
  spdlog::critical("{}", std::string(status.message()));
  return 1;
}

}  // namespace

namespace {

// Sent to itself when the listener stalls: stop as for SIGTERM, then start again.
constexpr int kRestartSignal = SIGUSR2;
constexpr const char* kRestartAddressVariable = "STOKE_RESTART_ADDRESS";

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

// --max-priority's "submitter=N".
absl::StatusOr<int32_t> ParseMaxPriority(const std::string& value) {
  const std::string prefix = "submitter=";
  int32_t n = 0;
  if (value.rfind(prefix, 0) != 0 || !absl::SimpleAtoi(value.substr(prefix.size()), &n)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max-priority ", value, ": expected submitter=N (N an integer)"));
  }
  return n;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"stoke-coordinator: queues training jobs and gang-schedules them onto GPU workers"};
  // Flags bound to its fields take their defaults from it.
  Coordinator::Options core_options;
  std::string address = "127.0.0.1:50051";
  std::string data_dir = DefaultDataDir();
  std::string local_workers = "auto";
  std::string metrics_address = "127.0.0.1:9464";
  std::string worker_binary = DefaultWorkerBinary();
  double heartbeat_timeout_s = 15;
  double start_timeout_s = 600;
  double backfill_window_s = 120;
  size_t max_jobs_per_owner = 500;
  uint64_t audit_max_entries = 1'000'000;
  size_t max_watch_streams = CoordinatorService::kDefaultWatchStreamsPerCaller;
  stoke::spec::LogFlags log_flags;
  std::vector<std::string> data_roots;
  app.add_option("--address", address, "gRPC listen address (port 0 picks a free port)")
      ->capture_default_str();
  app.add_option("--data-dir", data_dir, "Job store, job files and worker logs ($STOKE_DATA_DIR)")
      ->capture_default_str();
  std::string store_url;
  app.add_option("--store", store_url,
                 "Keep jobs in PostgreSQL at this URL (postgres://user:password@host:port/db) "
                 "instead of SQLite in --data-dir ($STOKE_STORE)")
      ->envname("STOKE_STORE");
  app.add_option("--local-workers", local_workers,
                 "Workers to launch here: auto (one per GPU, else 2 CPU workers), N, cpu:N, or 0")
      ->capture_default_str();
  int metrics_retention_s = 600;
  app.add_option("--metrics-retention", metrics_retention_s,
                 "Seconds a finished job's series stay on /metrics")
      ->capture_default_str();
  app.add_option("--metrics-address", metrics_address,
                 "Prometheus /metrics listen address (empty turns it off)")
      ->capture_default_str();
  app.add_option("--worker-binary", worker_binary, "stoke-worker to launch")->capture_default_str();
  std::string rendezvous_ports = "29400-29999";
  app.add_option("--rendezvous-ports", rendezvous_ports,
                 "FIRST-LAST: ports handed out in turn for the rendezvous of jobs of several "
                 "ranks (rank 0's host serves it; a script job's MASTER_PORT); two coordinators "
                 "whose workers share hosts need ranges of their own")
      ->capture_default_str();
  app.add_option("--heartbeat-timeout", heartbeat_timeout_s,
                 "Seconds of silence after which a worker is presumed dead")
      ->capture_default_str();
  app.add_option("--start-timeout", start_timeout_s,
                 "Seconds a worker has to start a job assigned to it; after that the job goes "
                 "back to the queue (no restart counted) and the worker is evicted (0: no limit)")
      ->capture_default_str();
  app.add_option("--max-watch-streams", max_watch_streams,
                 "WatchJob streams one caller (token name) may hold open at once")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--audit-max-entries", audit_max_entries,
                 "Audit entries the store keeps, the newest (pruned every 1000 written; 0: all)")
      ->capture_default_str();
  app.add_option("--max-jobs-per-owner", max_jobs_per_owner,
                 "Unfinished jobs one token's owner may have at once (one cap for all "
                 "without --auth-tokens); submissions beyond it get RESOURCE_EXHAUSTED")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--min-checkpoint-seconds", core_options.min_checkpoint_seconds,
                 "Least seconds between two checkpoints of a job, whatever its spec asks "
                 "(its last step's is always written)")
      ->capture_default_str();
  app.add_option("--max-job-bytes-per-owner", core_options.max_job_bytes_per_owner,
                 "Bytes one owner's job folders may hold together (500G, 2T: powers of 1024; 0: no "
                 "limit); "
                 "past it the owner's running jobs fail and submissions are refused")
      ->transform(CLI::AsSizeValue(false))
      ->capture_default_str();
  app.add_option("--backfill-window", backfill_window_s,
                 "Seconds a blocked job lets smaller jobs pass it before it reserves devices")
      ->capture_default_str();
  double preemption_grace_s = absl::ToDoubleSeconds(core_options.preemption_grace);
  app.add_option("--preemption-grace", preemption_grace_s,
                 "Seconds a preempted job has to stop at a step boundary before it is "
                 "cancelled (it then resumes from its newest checkpoint)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  std::string quotas_path;
  app.add_option("--quotas", quotas_path,
                 "YAML file of groups of owners and the devices guaranteed to each (see "
                 "docs/operations.md); idle guaranteed devices are lent, and reclaimed by "
                 "preemption")
      ->check(CLI::ExistingFile);
  double half_life_hours = absl::ToDoubleHours(core_options.fair_share_half_life);
  app.add_option("--fair-share-half-life-hours", half_life_hours,
                 "Hours after which an owner's past device use counts half in fair share")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  double starvation_minutes = absl::ToDoubleMinutes(core_options.scheduler.starvation_age);
  app.add_option("--starvation-minutes", starvation_minutes,
                 "Minutes after which a queued job goes ahead of fair share (among equal "
                 "priorities)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  std::string max_priority;
  app.add_option("--max-priority", max_priority,
                 "submitter=N: the highest resources.priority a submitter may set (admins may "
                 "set any)")
      ->check([](const std::string& value) {
        const auto parsed = ParseMaxPriority(value);
        return parsed.ok() ? std::string() : std::string{parsed.status().message()};
      });
  app.add_option("--data-root", data_roots,
                 "A folder job files may read data from (repeatable; default: "
                 "/usr/share/datasets and DATA_DIR/datasets)");
  stoke::spec::AddLogFlags(app, log_flags);
  double drain_seconds = 0;
  app.add_option("--drain-seconds", drain_seconds,
                 "On SIGTERM or SIGINT, answer health checks NOT_SERVING (gRPC) and 503 "
                 "(/readyz) for this long before closing the listener, so that a load "
                 "balancer stops sending first")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 600.0));
  bool stop_workers_on_exit = false, stop_workers = false;
  app.add_flag("--stop-workers-on-exit", stop_workers_on_exit,
               "On SIGTERM or SIGINT, stop the local workers too (their jobs go back to the "
               "queue when a coordinator next starts). By default they keep training and "
               "reattach to the next coordinator started on the same data dir");
  app.add_flag("--stop-workers", stop_workers,
               "Stop the local workers an earlier coordinator left running on DATA_DIR, "
               "then exit");
  std::string backup_path;
  app.add_option("--backup", backup_path,
                 "Write a consistent copy of DATA_DIR/stoke.db to this file and exit (safe "
                 "while a coordinator runs on the same data dir)");
  security::ServerTlsOptions tls;
  std::string auth_tokens_path, metrics_token_path;
  bool insecure = false, require_worker_cert = false;
  app.add_option("--tls-cert", tls.cert_path, "PEM certificate chain: serve gRPC over TLS");
  app.add_option("--tls-key", tls.key_path, "PEM private key of --tls-cert");
  app.add_option("--client-ca", tls.client_ca_path,
                 "PEM CA that signs client certificates (mutual TLS for workers)");
  app.add_flag("--require-worker-cert", require_worker_cert,
               "Workers must present a client certificate signed by --client-ca");
  app.add_option("--auth-tokens", auth_tokens_path,
                 "Tokens file (NAME ROLE sha256:HEX per line; `stoke token create` makes "
                 "lines): every call then needs a token");
  app.add_option("--metrics-token", metrics_token_path,
                 "File holding a token /metrics requires (HTTP basic auth password)");
  app.add_flag("--insecure", insecure,
               "Allow serving beyond loopback without TLS, without --auth-tokens, or /metrics "
               "without --metrics-token (not recommended)");
  std::string python_models = "submitter";
  app.add_option("--python-models", python_models,
                 "Who may submit Python models, whose code runs on the workers' hosts: off, "
                 "admin or submitter")
      ->capture_default_str()
      ->check(CLI::IsMember({"off", "admin", "submitter"}));
  stoke::spec::AddFlagSources(app, "STOKE_COORDINATOR_");
  if (const auto exit = stoke::spec::ParseFlags(app, argc, argv)) return *exit;
  // Blocked in every thread, so main alone takes them (sigwait): before anything starts a
  // thread (gRPC does as soon as credentials are made), or such a thread would be killed
  // by a signal that arrives while main is busy (a standby waiting for the lease).
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, kRestartSignal);
  sigaddset(&stop_signals, SIGHUP);  // read --auth-tokens again
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  // The address a restart of this process (after its listener stalled) keeps.
  if (const char* kept = std::getenv(kRestartAddressVariable)) {
    address = kept;
    unsetenv(kRestartAddressVariable);
  }
  RaiseFileLimit();
  signal(SIGPIPE, SIG_IGN);
  const stoke::server::FreeHeapReturner heap_returner;
  stoke::spec::ApplyLogFlags(log_flags);

  if (!backup_path.empty()) {
    if (!store_url.empty()) {
      return Fail(absl::InvalidArgumentError(
          "--backup copies the SQLite store; back up a PostgreSQL store (--store) with pg_dump"));
    }
    const std::string db = data_dir + "/stoke.db";
    if (!fs::exists(db)) {
      return Fail(absl::NotFoundError(absl::StrCat("--backup: no job store at ", db)));
    }
    auto store = SqliteJobStore::Open({db});
    if (!store.ok()) return Fail(store.status());
    if (auto s = (*store)->BackupTo(backup_path); !s.ok()) return Fail(s);
    spdlog::info("job store {} copied to {}", db, backup_path);
    return 0;
  }

  if (stop_workers) {
    const size_t stopped =
        LocalWorkerSupervisor::StopLeftWorkers(data_dir + "/workers", absl::Seconds(10));
    spdlog::info("stopped {} local worker{} left running on {}", stopped, stopped == 1 ? "" : "s",
                 data_dir);
    return 0;
  }

  // Security settings are checked before anything starts: a typo must not leave an open
  // coordinator running.
  if (tls.cert_path.empty() && !insecure && !security::IsLoopbackAddress(address)) {
    return Fail(absl::FailedPreconditionError(absl::StrCat(
        "--address ", address,
        " is reachable from other hosts: give --tls-cert and --tls-key (and --auth-tokens), "
        "or --insecure to serve plaintext anyway")));
  }
  // TLS alone does not make an exposed coordinator safe: without tokens every caller is an
  // anonymous admin, and /metrics names every job and host.
  if (auth_tokens_path.empty() && !insecure && !security::IsLoopbackAddress(address)) {
    return Fail(absl::FailedPreconditionError(absl::StrCat(
        "--address ", address,
        " is reachable from other hosts, and without --auth-tokens every caller is an "
        "anonymous admin: give --auth-tokens, or --insecure to serve it open anyway")));
  }
  if (!metrics_address.empty() && metrics_token_path.empty() && !insecure &&
      !security::IsLoopbackAddress(metrics_address)) {
    return Fail(absl::FailedPreconditionError(
        absl::StrCat("--metrics-address ", metrics_address,
                     " is reachable from other hosts: give --metrics-token (Prometheus' basic-auth "
                     "password), or --insecure to serve /metrics to anyone")));
  }
  if (require_worker_cert && tls.client_ca_path.empty()) {
    return Fail(absl::InvalidArgumentError("--require-worker-cert needs --client-ca"));
  }
  for (const auto& [path, flag] :
       {std::pair{tls.key_path, "--tls-key"}, std::pair{metrics_token_path, "--metrics-token"}}) {
    if (const std::string warning = security::ExposedSecretWarning(path, flag); !warning.empty()) {
      spdlog::warn("{}", warning);
    }
  }
  auto credentials = security::MakeServerCredentials(tls);
  if (!credentials.ok()) return Fail(credentials.status());
  AccessControl::Options access_options;
  access_options.require_worker_certificate = require_worker_cert;
  access_options.python_models =
      python_models == "off" ? std::nullopt : security::ParseRole(python_models);
  if (!max_priority.empty()) {
    access_options.max_submitter_priority = *ParseMaxPriority(max_priority);
  }
  if (!auth_tokens_path.empty()) {
    auto tokens = security::ReadTokenFile(auth_tokens_path);
    if (!tokens.ok()) return Fail(tokens.status());
    if (tokens->empty()) {
      return Fail(absl::InvalidArgumentError(
          absl::StrCat("--auth-tokens ", auth_tokens_path,
                       ": holds no token; add lines with `stoke token create NAME --role R`")));
    }
    access_options.tokens = *std::move(tokens);
  }
  std::string metrics_token;
  if (!metrics_token_path.empty()) {
    auto token = security::ReadTokenFromFile(metrics_token_path, "--metrics-token");
    if (!token.ok()) return Fail(token.status());
    metrics_token = *token;
  }

  std::error_code ec;
  for (const char* sub : {"", "/jobs", "/logs", "/datasets", "/workers"}) {
    fs::create_directories(data_dir + sub, ec);
    if (ec) {
      return Fail(absl::UnavailableError(absl::StrCat("--data-dir ", data_dir, ": cannot create ",
                                                      data_dir, sub, ": ", ec.message())));
    }
  }
  data_dir = fs::canonical(data_dir).string();

  auto opened = OpenJobStore(store_url, data_dir);
  if (!opened.ok()) return Fail(opened.status());
  std::unique_ptr<JobStore> store = std::move(opened->store);
  // SQLite's file can be emptied behind the coordinator's back; the marker notices. (A
  // PostgreSQL store is shared by several coordinators and kept by its own server.)
  std::optional<StoreMarker> marker;
  if (opened->shared == nullptr) {
    marker.emplace(data_dir + "/store.marker", data_dir + "/stoke.db");
    if (auto s = marker->Check(*store); !s.ok()) return Fail(s);
    if (auto s = marker->Update(*store); !s.ok()) return Fail(s);
  }
  // Before the gRPC server, which reports every call to it, and before waiting as a
  // standby, so that Prometheus sees a standby up (stoke_coordinator_leader 0). Until the
  // core serves, snapshots are empty.
  std::atomic<Coordinator*> serving{nullptr};
  std::unique_ptr<CoordinatorMetrics> metrics;
  if (!metrics_address.empty()) {
    CoordinatorMetrics::Options metrics_options;
    metrics_options.address = metrics_address;
    metrics_options.finished_job_retention = absl::Seconds(metrics_retention_s);
    metrics_options.token = metrics_token;
    metrics_options.leader = opened->shared == nullptr;
    auto started = CoordinatorMetrics::Start(metrics_options, [&serving] {
      Coordinator* c = serving.load();
      return c == nullptr ? MetricsSnapshot{} : MetricsSnapshot{c->GetCluster(), c->ActiveJobs()};
    });
    if (!started.ok()) return Fail(started.status());
    metrics = *std::move(started);
    spdlog::info("Prometheus metrics on http://{}/metrics", metrics->address());
    if (auto s = WriteAtomically(data_dir + "/metrics.address", metrics->address() + "\n");
        !s.ok()) {
      return Fail(s);
    }
  }
  if (opened->shared != nullptr) {
    spdlog::info("job store: PostgreSQL at {}", RedactedStoreUrl(store_url));
    std::thread lease_watch;
    // A standby may wait for the lease for ever: to systemd it is up (started, not
    // failed), and says what it waits for.
    NotifyServiceManager("READY=1\nSTATUS=standby: waiting for the leader's lease");
    if (auto s = LeadBeforeServing(*opened->shared, stop_signals, &lease_watch); !s.ok()) {
      if (s.code() != absl::StatusCode::kCancelled) return Fail(s);
      spdlog::info("stopped while standby");
      metrics.reset();
      fs::remove(data_dir + "/metrics.address", ec);
      return 0;
    }
    if (metrics) metrics->SetLeader(true);
  }
  EventHub hub(*store);
  RealClock clock;
  core_options.jobs_dir = data_dir + "/jobs";
  core_options.heartbeat_timeout = absl::Seconds(heartbeat_timeout_s);
  {
    unsigned first = 0, last = 0;
    char extra = 0;
    if (std::sscanf(rendezvous_ports.c_str(), "%u-%u%c", &first, &last, &extra) != 2 ||
        first < 1024 || first > last || last > 65535) {
      std::fprintf(stderr,
                   "stoke-coordinator: --rendezvous-ports %s: expected FIRST-LAST, ports from "
                   "1024 to 65535\n",
                   rendezvous_ports.c_str());
      return 2;
    }
    core_options.first_rendezvous_port = static_cast<uint16_t>(first);
    core_options.last_rendezvous_port = static_cast<uint16_t>(last);
  }
  core_options.start_timeout = absl::Seconds(start_timeout_s);
  core_options.scheduler.backfill_window = absl::Seconds(backfill_window_s);
  core_options.preemption_grace = absl::Seconds(preemption_grace_s);
  core_options.fair_share_half_life = absl::Hours(half_life_hours);
  core_options.scheduler.starvation_age = absl::Minutes(starvation_minutes);
  if (!quotas_path.empty()) {
    auto quotas = Quotas::Read(quotas_path);
    if (!quotas.ok()) return Fail(quotas.status());
    core_options.quotas = *std::move(quotas);
  }
  if (data_roots.empty()) data_roots = {"/usr/share/datasets", data_dir + "/datasets"};
  stoke::spec::DataRoots roots(data_roots);
  core_options.data_roots = roots.roots();
  core_options.max_unfinished_jobs_per_owner = max_jobs_per_owner;
  auto core = Coordinator::Create(core_options, *store, hub, clock);
  if (!core.ok()) return Fail(core.status());
  // On every way out, the metrics refresher stops before the core it reads goes.
  struct MetricsStopFirst {
    std::unique_ptr<CoordinatorMetrics>& metrics;
    ~MetricsStopFirst() { metrics.reset(); }
  } metrics_stop_first{metrics};
  if (auto s = (*core)->Start(); !s.ok()) return Fail(s);
  serving.store(core->get());

  Executor executor(4);
  // Reads apart: they must not queue behind calls that wait for a transition's disk sync.
  Executor read_executor(4);
  spdlog::info("jobs may read data under: {}", fmt::join(roots.roots(), ", "));
  // Local workers join with a token of their own, known only to the coordinators on this
  // data dir and the workers they launch (through a file only its user can read). It is
  // kept across restarts: workers left training by the previous coordinator reattach
  // with it.
  std::string local_join_token_path;
  std::optional<security::TokenEntry> local_workers_token;
  if (!access_options.tokens.empty() && local_workers != "0") {
    local_join_token_path = data_dir + "/local-worker.token";
    // Reused only if it is this user's own file that no one else may read: a token planted
    // by another user, or readable by others, would let them attach as a worker.
    struct stat st;
    const bool exists = lstat(local_join_token_path.c_str(), &st) == 0;
    const bool private_file =
        exists && S_ISREG(st.st_mode) && st.st_uid == geteuid() && (st.st_mode & 077) == 0;
    if (exists && !private_file) {
      spdlog::warn(
          "{}: not a file of this user's that only it can read (mode {:o}, owner uid {}); "
          "making a new token (local workers still holding the old one must be restarted)",
          local_join_token_path, st.st_mode & 07777, st.st_uid);
    }
    auto token = private_file
                     ? security::ReadTokenFromFile(local_join_token_path, "local worker token")
                     : absl::StatusOr<std::string>(absl::NotFoundError("none"));
    if (!token.ok()) {
      token = security::NewToken();
      if (!token.ok()) return Fail(token.status());
      std::remove(local_join_token_path.c_str());
      const int fd = open(local_join_token_path.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0600);
      const std::string line = *token + "\n";
      if (fd < 0 || write(fd, line.data(), line.size()) != static_cast<ssize_t>(line.size())) {
        if (fd >= 0) close(fd);
        return Fail(absl::UnavailableError(
            absl::StrCat(local_join_token_path, ": cannot write: ", std::strerror(errno))));
      }
      close(fd);
    }
    local_workers_token = {"local-workers", security::Role::kWorker, security::HashToken(*token)};
    access_options.tokens.push_back(*local_workers_token);
  }
  AccessControl access(std::move(access_options));
  AuditLog audit(*store, clock, audit_max_entries);
  CoordinatorService coordinator_service(**core, hub, executor, read_executor, std::move(roots),
                                         access, audit);
  coordinator_service.LimitWatchStreams(max_watch_streams);
  WorkerLinkService worker_link_service(**core, executor, access, audit);
  GrpcServer::Options server_options;
  server_options.address = address;
  server_options.observer = metrics.get();
  server_options.credentials = *credentials;
  auto server = GrpcServer::Start(server_options, {&coordinator_service, &worker_link_service});
  if (!server.ok()) return Fail(server.status());
  // A listener that stops accepting (see listener_watch.h) is recovered by starting this
  // coordinator again on the same address: workers ride through a restart.
  std::atomic<bool> restart{false};
  // The watch probes TCP listeners. A unix socket only its owner's processes may connect to
  // (its mode is the umask's), so only they could exhaust its descriptors.
  std::unique_ptr<ListenerWatch> watch;
  if (!absl::StartsWith((*server)->address(), "unix:")) {
    ListenerWatch::Options watch_options;
    watch_options.address = (*server)->address();
    auto created = ListenerWatch::Create(watch_options, [&restart] {
      restart = true;
      kill(getpid(), kRestartSignal);
    });
    if (!created.ok()) return Fail(created.status());
    watch = *std::move(created);
    watch->Start();
  }
  spdlog::info("stoke-coordinator {} listening on {} ({}, {}), data in {}", STOKE_VERSION,
               (*server)->address(), tls.cert_path.empty() ? "plaintext" : "TLS",
               access.enabled() ? "tokens required" : "no authentication", data_dir);
  // Tools and tests that start us on port 0 read the real address here.
  if (auto s = WriteAtomically(data_dir + "/coordinator.address", (*server)->address() + "\n");
      !s.ok()) {
    return Fail(s);
  }

  std::unique_ptr<LocalWorkerSupervisor> supervisor;
  auto plan = PlanLocalWorkers(local_workers, worker_binary);
  if (!plan.ok()) return Fail(plan.status());
  if (!plan->empty()) {
    LocalWorkerSupervisor::Options options;
    options.worker_binary = worker_binary;
    options.coordinator_address = LocalDialAddress((*server)->address());
    options.workers = *plan;
    options.log_dir = data_dir + "/logs";
    options.state_dir = data_dir + "/workers";
    options.address_file = data_dir + "/coordinator.address";
    options.join_token_file = local_join_token_path;
    // Local workers verify the coordinator with $STOKE_TLS_CA when set (they inherit our
    // environment), else with the certificate itself (self-signed deployments).
    if (!tls.cert_path.empty() && std::getenv("STOKE_TLS_CA") == nullptr) {
      options.tls_ca = tls.cert_path;
    }
    auto created = LocalWorkerSupervisor::Create(options);
    if (!created.ok()) return Fail(created.status());
    supervisor = *std::move(created);
    if (auto s = supervisor->Start(); !s.ok()) return Fail(s);
  }

  // systemd (Type=notify): units ordered after this one start once it takes calls.
  NotifyServiceManager(absl::StrCat("READY=1\nSTATUS=serving on ", (*server)->address()));

  // The marker follows the newest job every few seconds, and once more at the end.
  std::atomic<bool> marking{marker.has_value()};
  std::thread marker_updates([&] {
    while (marking.load()) {
      for (int i = 0; i < 20 && marking.load(); ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
      if (auto s = marker->Update(*store); marking.load() && !s.ok()) {
        spdlog::warn("store marker: {}", s.ToString());
      }
    }
  });
  // SIGHUP reads the tokens file again, as `systemctl reload` does: a file that no longer
  // parses, or holds no token, is refused and the tokens in force stay. Either way the
  // audit log says so.
  auto reload_tokens = [&] {
    if (auth_tokens_path.empty()) {
      spdlog::info("SIGHUP: there is no --auth-tokens file to read again");
      return;
    }
    auto tokens = security::ReadTokenFile(auth_tokens_path);
    if (tokens.ok() && tokens->empty()) {
      tokens = absl::InvalidArgumentError(absl::StrCat(auth_tokens_path, ": holds no token"));
    }
    absl::Status result = tokens.status();
    if (tokens.ok()) {
      if (local_workers_token) tokens->push_back(*local_workers_token);
      const size_t count = tokens->size();
      access.ReplaceTokens(*std::move(tokens));
      spdlog::info("--auth-tokens {}: read again on SIGHUP; {} tokens in force", auth_tokens_path,
                   count);
    } else {
      spdlog::error("--auth-tokens: not read again on SIGHUP, the tokens in force stay: {}",
                    absl::StrCat(result.message()));
    }
    audit.Record(Caller{"coordinator", security::Role::kAdmin, "signal:SIGHUP"}, "ReloadTokens",
                 auth_tokens_path, result);
    audit.Flush();
  };
  int sig = 0;
  for (sigwait(&stop_signals, &sig); sig == SIGHUP; sigwait(&stop_signals, &sig)) {
    NotifyServiceManager("RELOADING=1");
    reload_tokens();
    NotifyServiceManager("READY=1");
  }
  if (restart) {
    spdlog::warn("restarting on {} to listen again", (*server)->address());
  } else {
    spdlog::info("{} received; shutting down", strsignal(sig));
  }
  // Probes see it go first, while it still answers: gRPC health NOT_SERVING and /readyz
  // 503, for --drain-seconds; and systemd that it is stopping.
  if (!restart) NotifyServiceManager("STOPPING=1");
  (*server)->SetServing(false);
  if (metrics) metrics->SetDraining();
  if (drain_seconds > 0 && !restart) {
    spdlog::info("draining for {} s before closing the listener", drain_seconds);
    std::this_thread::sleep_for(std::chrono::duration<double>(drain_seconds));
  }
  if (watch) watch->Stop();
  (*core)->BeginShutdown();
  (*server)->Shutdown(std::chrono::seconds(2));
  if (supervisor && stop_workers_on_exit && !restart) {
    supervisor->Stop();
  } else if (supervisor) {
    const size_t left = supervisor->Running();
    supervisor->Leave();
    spdlog::info(
        "{} local worker{} keep training and reattach to the next coordinator on {}; "
        "`stoke-coordinator --stop-workers --data-dir {}` stops them",
        left, left == 1 ? "" : "s", data_dir, data_dir);
  }
  metrics.reset();
  executor.Stop();
  read_executor.Stop();
  marking = false;
  marker_updates.join();
  if (marker) {
    if (auto s = marker->Update(*store); !s.ok()) spdlog::warn("store marker: {}", s.ToString());
  }
  (*core)->Stop();
  fs::remove(data_dir + "/coordinator.address", ec);
  fs::remove(data_dir + "/metrics.address", ec);
  if (restart) {
    setenv(kRestartAddressVariable, (*server)->address().c_str(), 1);
    execv("/proc/self/exe", argv);
    spdlog::error("cannot start again: {}", std::strerror(errno));
    return 1;
  }
  spdlog::info("stopped");
  return 0;
}
