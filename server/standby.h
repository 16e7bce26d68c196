// A coordinator on a shared (PostgreSQL) store acts only while it leads. Before serving,
// it waits as a standby for the leader lease: it does not listen, so clients and workers
// that list several coordinators find the leader by trying the next address. Once it
// leads, a watch thread checks the lease every second; a coordinator that lost it exits
// at once (code 3), as a crashed one would, rather than act beside the new leader.
#pragma once

#include <signal.h>

#include <thread>

#include "absl/status/status.h"
#include "server/store/postgres_job_store.h"

namespace stoke::server {

// Blocks until this coordinator leads (OK) or a signal of `stop_signals` arrives
// (CANCELLED); then starts `*watch`, which runs until the process ends.
absl::Status LeadBeforeServing(PostgresJobStore& store, const sigset_t& stop_signals,
                               std::thread* watch);

}  // namespace stoke::server
