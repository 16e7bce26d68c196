#include "server/store/postgres_schema.h"

#include "absl/strings/str_cat.h"

namespace stoke::server {
namespace {

struct Migration {
  int version;
  const char* what;
  const char* sql;
};

// Append only: a released step never changes, the next version is a new entry. User
// supplied strings (request ids, owners, worker ids) are bytea: PostgreSQL text refuses
// NUL bytes, which a protobuf string may hold, and the store must keep what it is given.
constexpr Migration kMigrations[] = {
    {1, "jobs, events, submit requests, audit log, worker credentials", R"sql(
      CREATE TABLE jobs (
        id BIGSERIAL PRIMARY KEY,
        state INTEGER NOT NULL,
        owner BYTEA NOT NULL DEFAULT '',
        job BYTEA NOT NULL
      );
      CREATE INDEX jobs_by_state ON jobs (state, id);
      CREATE INDEX jobs_by_owner ON jobs (owner, id);
      CREATE TABLE events (
        job_id BIGINT NOT NULL REFERENCES jobs (id),
        seq BIGINT NOT NULL,
        event BYTEA NOT NULL,
        PRIMARY KEY (job_id, seq)
      );
      CREATE TABLE submit_requests (
        request_id BYTEA PRIMARY KEY,
        job_id BIGINT NOT NULL REFERENCES jobs (id)
      );
      CREATE TABLE audit (
        id BIGSERIAL PRIMARY KEY,
        entry BYTEA NOT NULL
      );
      CREATE TABLE worker_credentials (
        worker_id BYTEA PRIMARY KEY,
        credential BYTEA NOT NULL
      );
    )sql"},
    {2, "Python models' code by its SHA-256", R"sql(
      CREATE TABLE code_bundles (
        sha256 TEXT PRIMARY KEY,
        bundle BYTEA NOT NULL
      );
    )sql"},
};

// Any fixed number; coordinators of one database agree on it.
constexpr int64_t kMigrationLock = 0x53544f4b454d4947;  // "STOKEMIG"

}  // namespace

absl::Status MigratePostgresSchema(PgConnection& db) {
  PgTransaction txn(db);
  if (!txn.begun().ok()) return txn.begun();
  if (auto s = db.Exec("SELECT pg_advisory_xact_lock($1)", PgParams().Int(kMigrationLock));
      !s.ok()) {
    return s.status();
  }
  if (auto s = db.ExecScript(R"sql(
        CREATE TABLE IF NOT EXISTS stoke_schema_migrations (
          version INTEGER PRIMARY KEY,
          description TEXT NOT NULL,
          applied_at TIMESTAMPTZ NOT NULL DEFAULT now()
        ))sql");
      !s.ok()) {
    return s;
  }
  auto current = db.Exec("SELECT COALESCE(MAX(version), 0)::BIGINT FROM stoke_schema_migrations");
  if (!current.ok()) return current.status();
  const int64_t version = current->Int64(0, 0);
  if (version > kPostgresSchemaVersion) {
    return absl::FailedPreconditionError(
        absl::StrCat("PostgreSQL store ", db.description(), " has schema version ", version,
                     ", newer than this Stoke's ", kPostgresSchemaVersion,
                     "; run a newer stoke-coordinator or use another database"));
  }
  for (const Migration& step : kMigrations) {
    if (step.version <= version) continue;
    if (auto s = db.ExecScript(step.sql); !s.ok()) {
      return absl::Status(
          s.code(), absl::StrCat("migrating to schema version ", step.version, ": ", s.message()));
    }
    if (auto s =
            db.Exec("INSERT INTO stoke_schema_migrations (version, description) VALUES ($1, $2)",
                    PgParams().Int(step.version).Text(step.what));
        !s.ok()) {
      return s.status();
    }
  }
  return txn.Commit();
}

}  // namespace stoke::server
