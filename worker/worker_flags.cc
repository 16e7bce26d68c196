#include "worker/worker_flags.h"

#include <cstdint>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "spec/addresses.h"

namespace stoke::worker {

WorkerAgent::Options DefaultAgentOptions() {
  WorkerAgent::Options options;
  const char* address = std::getenv("STOKE_ADDRESS");
  options.coordinator_address = address ? address : defaults::kCoordinatorAddress;
  const char* ca = std::getenv("STOKE_TLS_CA");
  options.tls_ca = ca ? ca : "";
  return options;
}

std::chrono::milliseconds Milliseconds(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
}

std::chrono::milliseconds WorkerFlags::OrphanTimeout() const {
  double seconds = orphan_timeout_seconds;
  if (seconds < 0) seconds = agent.local ? kLocalOrphanTimeoutSeconds : 0;
  return Milliseconds(seconds);
}

namespace {

// The flags are added in two groups, in the order --help lists them (the order they are
// added in): where the coordinator is and who this worker is, then how it trains and how
// it proves itself.
void AddPlaceFlags(CLI::App& app, WorkerFlags* flags) {
  WorkerAgent::Options& agent = flags->agent;
  app.add_option("--coordinator", agent.coordinator_address,
                 "Coordinator address host:port, or several separated by commas: a leader and its "
                 "standbys ($STOKE_ADDRESS)")
      ->capture_default_str();
  app.add_option("--coordinator-address-file", agent.coordinator_address_file,
                 "File holding the coordinator's address, re-read before every attach attempt "
                 "(a restarted coordinator may listen elsewhere); the worker exits when its "
                 "folder is removed");
  app.add_option("--device", flags->device,
                 "cpu, cpu:N or cuda:N (default: cuda:0 if present, else cpu)");
  app.add_option("--id", agent.worker_id,
                 "Worker id, unique in the cluster (default: HOST/DEVICE)");
  app.add_flag("--local", agent.local, "Launched by the coordinator on its own host");
  app.add_option("--orphan-timeout", flags->orphan_timeout_seconds,
                 absl::StrCat("Seconds without any coordinator answering after which the worker "
                              "exits, once its running task (if any) has ended; 0: never "
                              "(default: ",
                              kLocalOrphanTimeoutSeconds,
                              " for --local workers, 0 for others, which their service manager "
                              "restarts)"))
      ->check(CLI::NonNegativeNumber);
  app.add_option("--stop-grace", flags->stop_grace_seconds,
                 "On SIGTERM or SIGINT, seconds the running task may take to stop at a step "
                 "boundary with a checkpoint of that step, when the coordinator preempts it "
                 "(its job resumes from that step elsewhere); then it is cancelled (the job "
                 "resumes from its newest checkpoint). 0: cancel it at once")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 3600.0));
  app.add_option("--device-sampling", flags->sampling_seconds,
                 "Seconds between device readings (NVML or /proc); 0 turns them off")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--advertise-address", agent.advertise_address,
                 "Address other ranks of a job reach this worker at (default: the address "
                 "the coordinator sees it connect from)");
}

void AddTrainingAndSecurityFlags(CLI::App& app, WorkerFlags* flags) {
  WorkerAgent::Options& agent = flags->agent;
  app.add_option("--threads", flags->threads, "Intra-op CPU threads (default: all cores)");
  app.add_flag("--list-devices", flags->list_devices,
               "Print the CUDA devices this process sees and exit");
  spec::AddLogFlags(app, flags->log);
  app.add_option("--tls-ca", agent.tls_ca,
                 "PEM CA to verify the coordinator with: TLS ($STOKE_TLS_CA)");
  app.add_option("--tls-cert", agent.tls_cert, "PEM client certificate (mutual TLS)");
  app.add_option("--tls-key", agent.tls_key, "PEM private key of --tls-cert");
  app.add_option("--join-token-file", flags->join_token_file,
                 "File holding the join token (a token of role worker) to attach with");
  app.add_option("--job-user", flags->job_user,
                 "Run the training processes of Python and TorchScript models (the user's code) "
                 "as this unprivileged user; for workers that run as root");
  app.add_option("--job-users", flags->job_users,
                 "Run each owner's code (Python and TorchScript models, scripts) as a uid of its "
                 "own from this range, FIRST-LAST: owners cannot reach each other's jobs; for "
                 "workers that run as root (default with --sandbox: 61000-61999)")
      ->excludes("--job-user");
  app.add_option("--sandbox", flags->sandbox,
                 "Run user code contained (stoke-sandbox): a root of its own showing only the "
                 "system, its job's folder and the data roots, new namespaces, and a cgroup per "
                 "attempt that nothing outlives. As root, as a uid per owner (--job-users) or "
                 "--job-user; otherwise as this worker's user, in a user namespace of its own")
      ->capture_default_str();
  app.add_option("--job-memory", flags->job_memory,
                 "With --sandbox: each attempt's memory limit (16G, 512M; default: the host's "
                 "memory divided among its GPUs, or half of it on a CPU worker)");
  app.add_option("--job-pids", flags->job_pids,
                 "With --sandbox: each attempt's processes and threads at most")
      ->capture_default_str();
  app.add_option("--job-users-table", flags->job_users_table,
                 "The file that keeps which uid each owner has (shared by the host's workers)")
      ->capture_default_str();
}

}  // namespace

void AddWorkerFlags(CLI::App& app, WorkerFlags* flags) {
  AddPlaceFlags(app, flags);
  AddTrainingAndSecurityFlags(app, flags);
  app.footer(
      "Environment: STOKE_ADDRESS, STOKE_TLS_CA (defaults of the flags above); "
      "STOKE_TRACE_DIR, STOKE_TRACE_STEPS (Kineto traces of a few steps of every job). "
      "Test hook: STOKE_FAULT_SLOW_STEP_MS=<ms> sleeps that long in each training step, "
      "before its gradient all-reduce (a rank slowed on purpose).");
}

}  // namespace stoke::worker
