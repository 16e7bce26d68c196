// Job stores for the store test suite: each factory makes one fresh, empty store that
// Open() opens again and again (the same data, as a restarted coordinator would): an
// SQLite file in a temp folder, or a database of its own on a PostgreSQL server that
// this test process starts once (postgres_server.h).
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "server/store/job_store.h"
#include "tests/support/postgres_server.h"

namespace stoke::testing {

class StoreFactory {
 public:
  virtual ~StoreFactory() = default;
  virtual absl::StatusOr<std::unique_ptr<server::JobStore>> Open() = 0;
};

// "sqlite" or "postgres". Null with *skip set when that store cannot run here (no
// PostgreSQL binaries: the test skips with that reason), or with *failure set when it
// should and does not (the server does not start: the test fails).
std::unique_ptr<StoreFactory> NewStoreFactory(const std::string& kind, std::string* skip,
                                              std::string* failure);

// This process's PostgreSQL server, started on first use and stopped at exit; null with
// *error set when there is none.
PostgresServer* SharedPostgresServer(std::string* error);

// A new empty database on the shared server: its URL, or "" with *error set.
std::string NewPostgresDatabase(std::string* error);

}  // namespace stoke::testing
