#include "server/store/open_store.h"

#include "absl/strings/str_cat.h"
#include "server/store/pg_connection.h"
#include "server/store/postgres_job_store.h"
#include "server/store/sqlite_job_store.h"

namespace stoke::server {

absl::StatusOr<std::unique_ptr<JobStore>> OpenJobStore(const std::string& store_url,
                                                       const std::string& data_dir) {
  if (store_url.empty()) {
    const std::string db = data_dir + "/stoke.db";
    if (auto s = CheckStoreNotEmptied(db, data_dir + "/jobs"); !s.ok()) return s;
    auto store = SqliteJobStore::Open({db});
    if (!store.ok()) return store.status();
    return std::unique_ptr<JobStore>(*std::move(store));
  }
  if (!IsPostgresUrl(store_url)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--store ", RedactedStoreUrl(store_url),
        ": expected a PostgreSQL URL (postgres://user@host:port/database); leave --store out "
        "for the SQLite store in --data-dir"));
  }
  auto store = PostgresJobStore::Open({store_url, "--store"});
  if (!store.ok()) return store.status();
  return std::unique_ptr<JobStore>(*std::move(store));
}

std::string RedactedStoreUrl(const std::string& store_url) {
  // scheme://user:password@host...: the password is between the first ':' after the
  // scheme and the last '@' before the path.
  const auto scheme_end = store_url.find("://");
  if (scheme_end == std::string::npos) return store_url;
  const auto authority_start = scheme_end + 3;
  const auto path_start = store_url.find('/', authority_start);
  const auto at =
      store_url.rfind('@', path_start == std::string::npos ? std::string::npos : path_start);
  if (at == std::string::npos || at < authority_start) return store_url;
  const auto colon = store_url.find(':', authority_start);
  if (colon == std::string::npos || colon > at) return store_url;
  return absl::StrCat(store_url.substr(0, colon + 1), "***", store_url.substr(at));
}

}  // namespace stoke::server
