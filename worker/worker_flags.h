// stoke-worker's flags: what its command line, its --config file and its STOKE_WORKER_*
// variables may set (and STOKE_ADDRESS and STOKE_TLS_CA, the defaults of --coordinator
// and --tls-ca). The link's options are bound directly, so that its defaults are the
// flags'; the rest say which device to train on and how.
#pragma once

#include <CLI/CLI.hpp>
#include <chrono>
#include <string>

#include "spec/log_setup.h"
#include "worker/link/job_users.h"
#include "worker/link/worker_agent.h"

namespace stoke::worker {

// A --local worker's --orphan-timeout when none is given: a coordinator that was killed
// leaves its local workers behind, and without a limit they would wait, holding their
// devices, forever. Other workers' service managers restart them: no limit.
inline constexpr double kLocalOrphanTimeoutSeconds = 900;

// The link's options before the flags: the coordinator at $STOKE_ADDRESS (else the
// default address) and verified with $STOKE_TLS_CA.
WorkerAgent::Options DefaultAgentOptions();

// A flag's seconds as the link and the sampler take them.
std::chrono::milliseconds Milliseconds(double seconds);

struct WorkerFlags {
  // --coordinator, --coordinator-address-file, --id, --local, --advertise-address,
  // --tls-ca, --tls-cert, --tls-key. The host, the device and the join token are filled
  // in at start.
  WorkerAgent::Options agent = DefaultAgentOptions();
  // cpu, cpu:N or cuda:N; empty: cuda:0 if present, else cpu.
  std::string device;
  // Seconds; negative: kLocalOrphanTimeoutSeconds for --local workers, 0 for others.
  double orphan_timeout_seconds = -1;
  // Seconds a running task may take to stop at a step boundary on SIGTERM; 0: cancel it.
  double stop_grace_seconds =
      std::chrono::duration<double>(WorkerAgent::Options{}.stop_grace).count();
  // Seconds between device readings; 0: none.
  double sampling_seconds = 1.0;
  int threads = 0;  // intra-op CPU threads; 0: every core
  bool list_devices = false;
  std::string join_token_file;
  std::string job_user;
  std::string job_users;  // "61000-61999": a uid of its own for each owner's code
  std::string job_users_table = kDefaultJobUsersTable;
  // User code in stoke-sandbox (its own root, namespaces and cgroup). As root, with a uid
  // per owner (--job-users, by default kDefaultJobUsers) or --job-user; otherwise as the
  // worker's own user, in a user namespace.
  bool sandbox = true;
  std::string job_memory;  // each attempt's memory limit ("16G"); "": the default
  uint64_t job_pids = 16384;
  spec::LogFlags log;

  // --orphan-timeout as the link takes it, once --local is known.
  std::chrono::milliseconds OrphanTimeout() const;
};

// Adds every flag of stoke-worker, and the footer on its environment, to `app`, writing
// into `flags` (whose fields, as they are when this is called, are the defaults --help
// shows).
void AddWorkerFlags(CLI::App& app, WorkerFlags* flags);

}  // namespace stoke::worker
