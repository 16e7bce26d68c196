#include "server/store/open_store.h"

#include "absl/strings/str_cat.h"
#include "server/store/pg_connection.h"
#include "server/store/postgres_job_store.h"
#include "server/store/sqlite_job_store.h"

namespace stoke::server {

absl::StatusOr<OpenedStore> OpenJobStore(const std::string& store_url,
                                         const std::string& data_dir) {
  if (store_url.empty()) {
    const std::string db = data_dir + "/stoke.db";
    if (auto s = CheckStoreNotEmptied(db, data_dir + "/jobs"); !s.ok()) return s;
    auto store = SqliteJobStore::Open({db});
    if (!store.ok()) return store.status();
    return OpenedStore{*std::move(store)};
  }
  if (!IsPostgresUrl(store_url)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--store ", RedactedStoreUrl(store_url),
        ": expected a PostgreSQL URL (postgres://user@host:port/database); leave --store out "
        "for the SQLite store in --data-dir"));
  }
  auto store = PostgresJobStore::Open({store_url, "--store"});
  if (!store.ok()) return store.status();
  PostgresJobStore* shared = store->get();
  return OpenedStore{*std::move(store), shared};
}

std::string RedactedStoreUrl(const std::string& store_url) {
  return RedactedPostgresUrl(store_url);
}

}  // namespace stoke::server
