// The job store a coordinator runs on, chosen by its flags: SQLite in --data-dir (the
// embedded default) or PostgreSQL when --store names a postgres:// URL.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "server/store/job_store.h"

namespace stoke::server {

// `store_url` empty: DATA_DIR/stoke.db. Otherwise a postgres:// or postgresql:// URL;
// anything else, a malformed URL or a server that does not answer fails with a message
// naming --store.
absl::StatusOr<std::unique_ptr<JobStore>> OpenJobStore(const std::string& store_url,
                                                       const std::string& data_dir);

// The URL with its password replaced by "***", for logs.
std::string RedactedStoreUrl(const std::string& store_url);

}  // namespace stoke::server
