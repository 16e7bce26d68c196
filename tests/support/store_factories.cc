#include "tests/support/store_factories.h"

#include <unistd.h>

#include <cstdlib>
#include <fstream>

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

// Under CTest, the server of the postgres_server fixture (tests/CMakeLists.txt), whose
// socket folder $STOKE_TEST_POSTGRES_STATE names; run alone, a server of our own.
std::unique_ptr<PostgresServer> StartOrAttach(std::string* error) {
  const char* state = std::getenv("STOKE_TEST_POSTGRES_STATE");
  if (state != nullptr && *state) {
    std::ifstream in(state);
    std::string dir;
    if (std::getline(in, dir) && !dir.empty()) return PostgresServer::Attach(dir, error);
  }
  return PostgresServer::Start(error);
}

}  // namespace

PostgresServer* SharedPostgresServer(std::string* error) {
  static std::string start_error;
  static std::unique_ptr<PostgresServer> server = StartOrAttach(&start_error);
  if (!server) *error = start_error;
  return server.get();
}

std::string NewPostgresDatabase(std::string* error) {
  PostgresServer* server = SharedPostgresServer(error);
  if (server == nullptr) return "";
  // Test processes share the fixture's server: the pid keeps their databases apart.
  static int databases = 0;
  return server->CreateDatabase(
      "stoke_test_" + std::to_string(getpid()) + "_" + std::to_string(++databases), error);
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
