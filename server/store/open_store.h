// The job store a coordinator runs on, chosen by its flags: SQLite in --data-dir (the
// embedded default) or PostgreSQL when --store names a postgres:// URL.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "server/store/job_store.h"

namespace stoke::server {

class PostgresJobStore;

struct OpenedStore {
  std::unique_ptr<JobStore> store;
  // Set when several coordinators may share the store (PostgreSQL): this one must hold
  // the leader lease before it acts (PostgresJobStore::WaitForLeadership).
  PostgresJobStore* shared = nullptr;
};

// `store_url` empty: DATA_DIR/stoke.db. Otherwise a postgres:// or postgresql:// URL;
// anything else, a malformed URL or a server that does not answer fails with a message
// naming --store.
absl::StatusOr<OpenedStore> OpenJobStore(const std::string& store_url, const std::string& data_dir);

// The URL with its password replaced by "***", for logs.
std::string RedactedStoreUrl(const std::string& store_url);

}  // namespace stoke::server
