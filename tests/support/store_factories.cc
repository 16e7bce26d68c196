#include "tests/support/store_factories.h"

#include "server/store/postgres_job_store.h"
#include "server/store/sqlite_job_store.h"
#include "tests/support/temp_dir.h"

namespace stoke::testing {
namespace {

class SqliteFactory : public StoreFactory {
 public:
  absl::StatusOr<std::unique_ptr<server::JobStore>> Open() override {
    auto store = server::SqliteJobStore::Open({dir_.File("stoke.db")});
    if (!store.ok()) return store.status();
    return std::unique_ptr<server::JobStore>(*std::move(store));
  }

 private:
  TempDir dir_;
};

class PostgresFactory : public StoreFactory {
 public:
  explicit PostgresFactory(std::string url) : url_(std::move(url)) {}
  absl::StatusOr<std::unique_ptr<server::JobStore>> Open() override {
    auto store = server::PostgresJobStore::Open({url_});
    if (!store.ok()) return store.status();
    return std::unique_ptr<server::JobStore>(*std::move(store));
  }

 private:
  std::string url_;
};

}  // namespace

PostgresServer* SharedPostgresServer(std::string* error) {
  static std::string start_error;
  static std::unique_ptr<PostgresServer> server = PostgresServer::Start(&start_error);
  if (!server) *error = start_error;
  return server.get();
}

std::string NewPostgresDatabase(std::string* error) {
  PostgresServer* server = SharedPostgresServer(error);
  if (server == nullptr) return "";
  static int databases = 0;
  return server->CreateDatabase("stoke_test_" + std::to_string(++databases), error);
}

std::unique_ptr<StoreFactory> NewStoreFactory(const std::string& kind, std::string* skip,
                                              std::string* failure) {
  if (kind == "sqlite") return std::make_unique<SqliteFactory>();
  if (FindPostgresBinDir().empty()) {
    SharedPostgresServer(skip);  // says why
    return nullptr;
  }
  // Binaries present but no server: a failure, not a skip.
  const std::string url = NewPostgresDatabase(failure);
  if (url.empty()) return nullptr;
  return std::make_unique<PostgresFactory>(url);
}

}  // namespace stoke::testing
