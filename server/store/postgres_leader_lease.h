// The leader lease of coordinators sharing one PostgreSQL store: a session-level advisory
// lock held by the store's own connection. Every write a coordinator makes goes through
// that session, so a write that succeeds was made by the leader: when the session ends
// (the coordinator died, or the network between it and the server did), PostgreSQL
// releases the lock, a standby takes it, and the old session's successor finds the lock
// taken and is fenced (postgres_job_store.h).
#pragma once

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/store/pg_connection.h"

namespace stoke::server {

// Tries to take the lease on this session (at once, no waiting): true if it holds it now.
absl::StatusOr<bool> TryTakeLeaderLease(PgConnection& db);

// Settings of a leader's session: the server probes the connection so that a leader whose
// host vanished (no FIN ever comes) loses the lease within about `dead_after`.
absl::Status ConfigureLeaderSession(PgConnection& db, absl::Duration dead_after);

}  // namespace stoke::server
