// The PostgreSQL store's schema and its forward migrations. Each version is one step in
// a list; the versions applied are rows of stoke_schema_migrations, so an operator can
// see with psql what ran and when. PostgreSQL changes schemas inside transactions: a
// migration is applied whole or not at all.
#pragma once

#include "absl/status/status.h"
#include "server/store/pg_connection.h"

namespace stoke::server {

inline constexpr int kPostgresSchemaVersion = 2;

// Brings the database to kPostgresSchemaVersion. Coordinators starting together on one
// database take turns (an advisory lock held for the transaction). A database of a newer
// version is refused (FAILED_PRECONDITION naming the versions), never written.
absl::Status MigratePostgresSchema(PgConnection& db);

}  // namespace stoke::server
