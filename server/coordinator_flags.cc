#include "server/coordinator_flags.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "security/auth_tokens.h"
#include "security/grpc_credentials.h"
#include "spec/addresses.h"

namespace fs = std::filesystem;

namespace stoke::server {

std::string DefaultDataDir() {
  if (const char* env = std::getenv("STOKE_DATA_DIR")) return env;
  if (const char* home = std::getenv("HOME")) return absl::StrCat(home, "/.stoke");
  return ".stoke";
}

std::string DefaultWorkerBinary() {
  std::error_code ec;
  fs::path self = fs::read_symlink("/proc/self/exe", ec);
  return ec ? "stoke-worker" : (self.parent_path() / "stoke-worker").string();
}

CoordinatorMetrics::Options DefaultMetricsOptions() {
  CoordinatorMetrics::Options options;
  options.address = defaults::kMetricsAddress;
  return options;
}

std::string RendezvousPortsText(const Coordinator::Options& core) {
  return absl::StrCat(core.first_rendezvous_port, "-", core.last_rendezvous_port);
}

absl::StatusOr<int32_t> ParseMaxPriority(const std::string& value) {
  const std::string prefix = "submitter=";
  int32_t n = 0;
  if (value.rfind(prefix, 0) != 0 || !absl::SimpleAtoi(value.substr(prefix.size()), &n)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max-priority ", value, ": expected submitter=N (N an integer)"));
  }
  return n;
}

bool ParseRendezvousPorts(const std::string& text, Coordinator::Options* core) {
  unsigned first = 0, last = 0;
  char extra = 0;
  if (std::sscanf(text.c_str(), "%u-%u%c", &first, &last, &extra) != 2 || first < 1024 ||
      first > last || last > 65535) {
    return false;
  }
  core->first_rendezvous_port = static_cast<uint16_t>(first);
  core->last_rendezvous_port = static_cast<uint16_t>(last);
  return true;
}

absl::Status CheckSecurityFlags(const CoordinatorFlags& flags) {
  const std::string& address = flags.server.address;
  const bool exposed = !flags.insecure && !security::IsLoopbackAddress(address);
  if (exposed && flags.tls.cert_path.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--address ", address,
        " is reachable from other hosts: give --tls-cert and --tls-key (and --auth-tokens), "
        "or --insecure to serve plaintext anyway"));
  }
  // TLS alone does not make an exposed coordinator safe: without tokens every caller is an
  // anonymous admin, and /metrics names every job and host.
  if (exposed && flags.auth_tokens_path.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("--address ", address,
                     " is reachable from other hosts, and without --auth-tokens every caller is an "
                     "anonymous admin: give --auth-tokens, or --insecure to serve it open anyway"));
  }
  const std::string& metrics_address = flags.metrics.address;
  if (!metrics_address.empty() && flags.metrics_token_path.empty() && !flags.insecure &&
      !security::IsLoopbackAddress(metrics_address)) {
    return absl::FailedPreconditionError(
        absl::StrCat("--metrics-address ", metrics_address,
                     " is reachable from other hosts: give --metrics-token (Prometheus' basic-auth "
                     "password), or --insecure to serve /metrics to anyone"));
  }
  if (flags.access.require_worker_certificate && flags.tls.client_ca_path.empty()) {
    return absl::InvalidArgumentError("--require-worker-cert needs --client-ca");
  }
  return absl::OkStatus();
}

namespace {

// A flag in `unit`s (seconds, minutes, hours) that sets an absl::Duration of a
// component's options: typed FLOAT as a double flag is, and showing the field's own value
// as its default, so that the default is the component's.
CLI::Option* AddDurationOption(CLI::App& app, const std::string& name, absl::Duration* field,
                               absl::Duration unit, const std::string& help) {
  CLI::Option* option = app.add_option_function<double>(
      name, [field, unit](const double& count) { *field = count * unit; }, help);
  option->default_str(CLI::detail::to_string(absl::FDivDuration(*field, unit)));
  return option;
}

// The flags are added in groups, in the order --help lists them (which is the order
// they were added in): where it listens, where it keeps things, and whom it launches.
void AddPlaceFlags(CLI::App& app, CoordinatorFlags* flags) {
  app.add_option("--address", flags->server.address,
                 "gRPC listen address (port 0 picks a free port)")
      ->capture_default_str();
  app.add_option("--data-dir", flags->data_dir,
                 "Job store, job files and worker logs ($STOKE_DATA_DIR)")
      ->capture_default_str();
  app.add_option("--store", flags->store_url,
                 "Keep jobs in PostgreSQL at this URL (postgres://user:password@host:port/db) "
                 "instead of SQLite in --data-dir ($STOKE_STORE)")
      ->envname("STOKE_STORE");
  app.add_option("--local-workers", flags->local_workers,
                 "Workers to launch here: auto (one per GPU, else 2 CPU workers), N, cpu:N, or 0")
      ->capture_default_str();
  app.add_option("--job-users", flags->local_job_users,
                 "Local workers run each owner's code as a uid of its own from this range, "
                 "FIRST-LAST (default, as root: 61000-61999); the coordinator must run as root. "
                 "Local workers contain user code either way (--local-worker-flag=--sandbox=false "
                 "turns that off)");
  app.add_option("--local-worker-flag", flags->local_worker_flags,
                 "A flag for every local worker, as stoke-worker takes it "
                 "(--local-worker-flag=--job-memory=8G); repeatable");
  // Whole seconds, as the flag always took them.
  absl::Duration* retention = &flags->metrics.finished_job_retention;
  app.add_option_function<int>(
         "--metrics-retention",
         [retention](const int& seconds) { *retention = absl::Seconds(seconds); },
         "Seconds a finished job's series stay on /metrics")
      ->default_str(CLI::detail::to_string(absl::ToInt64Seconds(*retention)));
  app.add_option("--metrics-address", flags->metrics.address,
                 "Prometheus /metrics listen address (empty turns it off)")
      ->capture_default_str();
  app.add_option("--worker-binary", flags->worker_binary, "stoke-worker to launch")
      ->capture_default_str();
  app.add_option("--rendezvous-ports", flags->rendezvous_ports,
                 "FIRST-LAST: ports handed out in turn for the rendezvous of jobs of several "
                 "ranks (rank 0's host serves it; a script job's MASTER_PORT); two coordinators "
                 "whose workers share hosts need ranges of their own")
      ->capture_default_str();
}

// How long the core waits for workers, and what one caller or owner may hold.
void AddLimitFlags(CLI::App& app, CoordinatorFlags* flags) {
  Coordinator::Options& core = flags->core;
  AddDurationOption(app, "--heartbeat-timeout", &core.heartbeat_timeout, absl::Seconds(1),
                    "Seconds of silence after which a worker is presumed dead");
  AddDurationOption(
      app, "--start-timeout", &core.start_timeout, absl::Seconds(1),
      "Seconds a worker has to start a job assigned to it; after that the job goes "
      "back to the queue (no restart counted) and the worker is evicted (0: no limit)");
  app.add_option("--max-watch-streams", flags->max_watch_streams,
                 "WatchJob streams one caller (token name) may hold open at once")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--audit-max-entries", flags->audit_max_entries,
                 "Audit entries the store keeps, the newest (pruned every 1000 written; 0: all)")
      ->capture_default_str();
  app.add_option("--max-jobs-per-owner", core.max_unfinished_jobs_per_owner,
                 "Unfinished jobs one token's owner may have at once (one cap for all "
                 "without --auth-tokens); submissions beyond it get RESOURCE_EXHAUSTED")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--min-checkpoint-seconds", core.min_checkpoint_seconds,
                 "Least seconds between two checkpoints of a job, whatever its spec asks "
                 "(its last step's is always written)")
      ->capture_default_str();
  app.add_option("--max-job-bytes-per-owner", core.max_job_bytes_per_owner,
                 "Bytes one owner's job folders may hold together (500G, 2T: powers of 1024; 0: no "
                 "limit); "
                 "past it the owner's running jobs fail and submissions are refused")
      ->transform(CLI::AsSizeValue(false))
      ->capture_default_str();
  app.add_option("--job-log-rate", core.log_limits.bytes_per_second,
                 "Bytes a second of log lines one job may store (32K; 0: no limit), beyond a "
                 "burst of 1M; lines over it are dropped and counted in the job's log")
      ->transform(CLI::AsSizeValue(false))
      ->capture_default_str();
  app.add_option("--job-log-max", core.log_limits.total_bytes,
                 "Bytes of log lines one job may store in all (64M; 0: no limit); lines past "
                 "it are dropped and counted")
      ->transform(CLI::AsSizeValue(false))
      ->capture_default_str();
}

// Which job runs next: backfill, preemption, quotas, fair share and priorities; and
// where jobs may read data.
void AddSchedulingFlags(CLI::App& app, CoordinatorFlags* flags) {
  Coordinator::Options& core = flags->core;
  AddDurationOption(app, "--backfill-window", &core.scheduler.backfill_window, absl::Seconds(1),
                    "Seconds a blocked job lets smaller jobs pass it before it reserves devices");
  AddDurationOption(app, "--preemption-grace", &core.preemption_grace, absl::Seconds(1),
                    "Seconds a preempted job has to stop at a step boundary before it is "
                    "cancelled (it then resumes from its newest checkpoint)")
      ->check(CLI::PositiveNumber);
  app.add_option("--quotas", flags->quotas_path,
                 "YAML file of groups of owners and the devices guaranteed to each (see "
                 "docs/operations.md); idle guaranteed devices are lent, and reclaimed by "
                 "preemption")
      ->check(CLI::ExistingFile);
  AddDurationOption(app, "--fair-share-half-life-hours", &core.fair_share_half_life, absl::Hours(1),
                    "Hours after which an owner's past device use counts half in fair share")
      ->check(CLI::PositiveNumber);
  AddDurationOption(app, "--starvation-minutes", &core.scheduler.starvation_age, absl::Minutes(1),
                    "Minutes after which a queued job goes ahead of fair share (among equal "
                    "priorities)")
      ->check(CLI::PositiveNumber);
  std::optional<int32_t>* max_priority = &flags->access.max_submitter_priority;
  app.add_option_function<std::string>(
         "--max-priority",
         [max_priority](const std::string& value) { *max_priority = *ParseMaxPriority(value); },
         "submitter=N: the highest resources.priority a submitter may set (admins may "
         "set any)")
      ->check([](const std::string& value) {
        const auto parsed = ParseMaxPriority(value);
        return parsed.ok() ? std::string() : std::string{parsed.status().message()};
      });
  app.add_option("--data-root", flags->data_roots,
                 "A folder job files may read data from (repeatable; default: "
                 "/usr/share/datasets and DATA_DIR/datasets)");
}

// Logging, and how the coordinator stops, or what it does instead of serving.
void AddLifecycleFlags(CLI::App& app, CoordinatorFlags* flags) {
  spec::AddLogFlags(app, flags->log);
  app.add_option("--drain-seconds", flags->drain_seconds,
                 "On SIGTERM or SIGINT, answer health checks NOT_SERVING (gRPC) and 503 "
                 "(/readyz) for this long before closing the listener, so that a load "
                 "balancer stops sending first")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 600.0));
  app.add_flag("--stop-workers-on-exit", flags->stop_workers_on_exit,
               "On SIGTERM or SIGINT, stop the local workers too (their jobs go back to the "
               "queue when a coordinator next starts). By default they keep training and "
               "reattach to the next coordinator started on the same data dir");
  app.add_flag("--stop-workers", flags->stop_workers,
               "Stop the local workers an earlier coordinator left running on DATA_DIR, "
               "then exit");
  app.add_option("--backup", flags->backup_path,
                 "Write a consistent copy of DATA_DIR/stoke.db to this file and exit (safe "
                 "while a coordinator runs on the same data dir)");
}

// TLS, tokens, and who may run code on the workers' hosts.
void AddSecurityFlags(CLI::App& app, CoordinatorFlags* flags) {
  app.add_option("--tls-cert", flags->tls.cert_path, "PEM certificate chain: serve gRPC over TLS");
  app.add_option("--tls-key", flags->tls.key_path, "PEM private key of --tls-cert");
  app.add_option("--client-ca", flags->tls.client_ca_path,
                 "PEM CA that signs client certificates (mutual TLS for workers)");
  app.add_flag("--require-worker-cert", flags->access.require_worker_certificate,
               "Workers must present a client certificate signed by --client-ca");
  app.add_option("--auth-tokens", flags->auth_tokens_path,
                 "Tokens file (NAME ROLE sha256:HEX per line; `stoke token create` makes "
                 "lines): every call then needs a token");
  app.add_option("--metrics-token", flags->metrics_token_path,
                 "File holding a token /metrics requires (HTTP basic auth password)");
  app.add_flag("--insecure", flags->insecure,
               "Allow serving beyond loopback without TLS, without --auth-tokens, or /metrics "
               "without --metrics-token (not recommended)");
  std::optional<security::Role>* python_models = &flags->access.python_models;
  app.add_option_function<std::string>(
         "--python-models",
         [python_models](const std::string& value) {
           *python_models = value == "off" ? std::nullopt : security::ParseRole(value);
         },
         "Who may submit Python models, whose code runs on the workers' hosts: off, "
         "admin or submitter")
      ->default_str(*python_models ? security::RoleName(**python_models) : "off")
      ->check(CLI::IsMember({"off", "admin", "submitter"}));
}

}  // namespace

void AddCoordinatorFlags(CLI::App& app, CoordinatorFlags* flags) {
  AddPlaceFlags(app, flags);
  AddLimitFlags(app, flags);
  AddSchedulingFlags(app, flags);
  AddLifecycleFlags(app, flags);
  AddSecurityFlags(app, flags);
}

}  // namespace stoke::server
