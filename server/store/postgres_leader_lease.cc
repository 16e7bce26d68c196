#include "server/store/postgres_leader_lease.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace stoke::server {
namespace {

// Any fixed number; coordinators of one database agree on it (advisory locks are scoped
// to the database, so two Stoke databases on one server have a leader each).
constexpr int64_t kLeaderLease = 0x53544f4b454c4541;  // "STOKELEA"

}  // namespace

absl::StatusOr<bool> TryTakeLeaderLease(PgConnection& db) {
  auto taken = db.Exec("SELECT pg_try_advisory_lock($1)::INT", PgParams().Int(kLeaderLease));
  if (!taken.ok()) return taken.status();
  return taken->Int64(0, 0) == 1;
}

absl::Status ConfigureLeaderSession(PgConnection& db, absl::Duration dead_after) {
  // Idle for a third of the time, then three probes a ninth apart. Unix sockets ignore
  // these: there the kernel tells the server at once that its peer is gone.
  const int64_t idle = std::max<int64_t>(1, absl::ToInt64Seconds(dead_after / 3));
  const int64_t interval = std::max<int64_t>(1, absl::ToInt64Seconds(dead_after / 9));
  return db.ExecScript(absl::StrCat("SET tcp_keepalives_idle = ", idle,
                                    "; SET tcp_keepalives_interval = ", interval,
                                    "; SET tcp_keepalives_count = 3"));
}

}  // namespace stoke::server
