// What only the PostgreSQL store does: its versioned migrations table, refusing a newer
// schema, coordinators migrating one database at once, clear errors naming --store for a
// bad URL or a server that does not answer, and riding through a server restart.
#include "server/store/postgres_job_store.h"

#include <gtest/gtest.h>
#include <libpq-fe.h>

#include <thread>

#include "server/store/open_store.h"
#include "server/store/postgres_schema.h"
#include "server/store/sqlite_job_store.h"
#include "tests/support/store_factories.h"
#include "tests/support/temp_dir.h"

namespace stoke::server {
namespace {

using stoke::testing::FindPostgresBinDir;
using stoke::testing::NewPostgresDatabase;
using stoke::testing::PostgresServer;
using stoke::testing::TempDir;

// Runs one statement outside the store, as an operator with psql would.
std::string Query(const std::string& url, const std::string& sql) {
  PGconn* conn = PQconnectdb(url.c_str());
  PGresult* result = PQexec(conn, sql.c_str());
  std::string value =
      PQntuples(result) > 0 ? PQgetvalue(result, 0, 0) : PQresultErrorMessage(result);
  PQclear(result);
  PQfinish(conn);
  return value;
}

v1::Job NewJob(const std::string& name) {
  v1::Job job;
  job.mutable_spec()->set_name(name);
  job.set_state(v1::JOB_STATE_PENDING);
  return job;
}

class PostgresJobStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (FindPostgresBinDir().empty()) {
      GTEST_SKIP() << "PostgreSQL server binaries not found: install Debian's postgresql "
                      "(scripts/setup-deps.sh)";
    }
    std::string error;
    url_ = NewPostgresDatabase(&error);
    ASSERT_FALSE(url_.empty()) << error;
  }
  std::string url_;
};

TEST_F(PostgresJobStoreTest, RecordsEachSchemaVersionItApplies) {
  auto store = PostgresJobStore::Open({url_});
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_EQ(Query(url_, "SELECT max(version) FROM stoke_schema_migrations"),
            std::to_string(kPostgresSchemaVersion));
  EXPECT_EQ(Query(url_, "SELECT count(*) FROM stoke_schema_migrations"),
            std::to_string(kPostgresSchemaVersion));
  store->reset();
  // Opening again applies nothing twice.
  ASSERT_TRUE(PostgresJobStore::Open({url_}).ok());
  EXPECT_EQ(Query(url_, "SELECT count(*) FROM stoke_schema_migrations"),
            std::to_string(kPostgresSchemaVersion));
}

TEST_F(PostgresJobStoreTest, RefusesADatabaseOfANewerSchemaAndLeavesItAlone) {
  ASSERT_TRUE(PostgresJobStore::Open({url_}).ok());
  Query(url_, "INSERT INTO stoke_schema_migrations (version, description) VALUES (99, 'later')");
  auto store = PostgresJobStore::Open({url_});
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(store.status().message().find("schema version 99"), absl::string_view::npos)
      << store.status();
  EXPECT_EQ(Query(url_, "SELECT count(*) FROM stoke_schema_migrations"),
            std::to_string(kPostgresSchemaVersion + 1));
}

// Two coordinators started together on a new database: one migrates, the other waits and
// finds the schema in place.
TEST_F(PostgresJobStoreTest, CoordinatorsStartingTogetherBothOpenTheStore) {
  std::vector<absl::Status> results(4);
  std::vector<std::thread> threads;
  for (auto& result : results) {
    threads.emplace_back([&] { result = PostgresJobStore::Open({url_}).status(); });
  }
  for (auto& thread : threads) thread.join();
  for (const auto& result : results) EXPECT_TRUE(result.ok()) << result;
  EXPECT_EQ(Query(url_, "SELECT count(*) FROM stoke_schema_migrations"),
            std::to_string(kPostgresSchemaVersion));
}

TEST_F(PostgresJobStoreTest, TwoStoresOnOneDatabaseSeeEachOthersJobs) {
  auto first = *PostgresJobStore::Open({url_});
  auto second = *PostgresJobStore::Open({url_});
  ASSERT_EQ(first->CreateJob(NewJob("a"), {})->id(), "1");
  ASSERT_EQ(second->CreateJob(NewJob("b"), {})->id(), "2");
  EXPECT_EQ(first->GetJob("2")->spec().name(), "b");
  EXPECT_EQ(second->GetJob("1")->spec().name(), "a");
}

TEST(PostgresStoreFlag, AMalformedUrlIsRefusedNamingTheFlag) {
  TempDir dir;
  for (const char* url : {"mysql://db/stoke", "postgres://[::1/stoke", "stoke.db"}) {
    auto store = OpenJobStore(url, dir.path());
    ASSERT_FALSE(store.ok()) << url;
    EXPECT_EQ(store.status().code(), absl::StatusCode::kInvalidArgument) << url;
    EXPECT_NE(store.status().message().find("--store"), absl::string_view::npos) << store.status();
  }
}

TEST(PostgresStoreFlag, AServerThatDoesNotAnswerIsUnavailableNamingTheFlag) {
  TempDir dir;
  // A socket folder with no server in it: refused at once, no network involved.
  const std::string url =
      "postgresql://stoke:secret-word@/stoke?host=" + dir.path() + "&connect_timeout=2";
  auto store = OpenJobStore(url, dir.path());
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kUnavailable) << store.status();
  EXPECT_NE(store.status().message().find("--store"), absl::string_view::npos) << store.status();
  EXPECT_NE(store.status().message().find(dir.path()), absl::string_view::npos) << store.status();
  EXPECT_EQ(store.status().message().find("secret-word"), absl::string_view::npos)
      << store.status();
}

TEST(PostgresStoreFlag, LogsShowUrlsWithoutTheirPassword) {
  EXPECT_EQ(RedactedStoreUrl("postgres://stoke:hunter2@db.example:5432/stoke"),
            "postgres://stoke:***@db.example:5432/stoke");
  EXPECT_EQ(RedactedStoreUrl("postgres://stoke@db/stoke"), "postgres://stoke@db/stoke");
  EXPECT_EQ(RedactedStoreUrl("postgresql:///stoke?host=/tmp/x"), "postgresql:///stoke?host=/tmp/x");
}

TEST(PostgresStoreFlag, NoStoreFlagMeansSqliteInTheDataDir) {
  TempDir dir;
  auto store = OpenJobStore("", dir.path());
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_EQ(store->shared, nullptr);
  ASSERT_TRUE(store->store->CreateJob(NewJob("local"), {}).ok());
  store->store.reset();
  auto again = SqliteJobStore::Open({dir.File("stoke.db")});
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ((*again)->GetJob("1")->spec().name(), "local");
}

TEST_F(PostgresJobStoreTest, APostgresUrlInTheStoreFlagKeepsJobsThere) {
  TempDir dir;
  auto store = OpenJobStore(url_, dir.path());
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_NE(store->shared, nullptr);
  ASSERT_TRUE(store->store->CreateJob(NewJob("central"), {}).ok());
  EXPECT_EQ(Query(url_, "SELECT count(*) FROM jobs"), "1");
}

// A restarted (or failed over) PostgreSQL server: the call that finds the connection gone
// fails UNAVAILABLE, as a busy SQLite file does, and the next one reconnects.
TEST(PostgresJobStoreRestart, KeepsWorkingAfterTheServerRestarts) {
  if (FindPostgresBinDir().empty()) GTEST_SKIP() << "PostgreSQL server binaries not found";
  std::string error;
  auto server = PostgresServer::Start(&error);
  ASSERT_NE(server, nullptr) << error;
  const std::string url = server->CreateDatabase("restarted", &error);
  ASSERT_FALSE(url.empty()) << error;
  auto store = *PostgresJobStore::Open({url});
  ASSERT_TRUE(store->CreateJob(NewJob("before"), {}).ok());
  ASSERT_TRUE(server->Restart()) << server->Log();
  absl::StatusOr<v1::Job> job = absl::UnknownError("not tried");
  for (int attempt = 0; attempt < 3 && !job.ok(); ++attempt) {
    job = store->CreateJob(NewJob("after"), {});
    if (!job.ok()) {
      EXPECT_EQ(job.status().code(), absl::StatusCode::kUnavailable) << job.status();
    }
  }
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(store->GetJob("1")->spec().name(), "before");
  EXPECT_EQ(store->GetJob(job->id())->spec().name(), "after");
}

}  // namespace
}  // namespace stoke::server

namespace stoke::server {
namespace {

// Ends the sessions holding the leader lease, as a network cut between a coordinator and
// the server would. Only this test's database's: the server is shared by the tests that
// run alongside, whose leases (and migrations' locks) must not be cut.
void CutTheLeadersSession(const std::string& url) {
  Query(url,
        "SELECT count(pg_terminate_backend(pid)) FROM pg_locks "
        "WHERE locktype = 'advisory' AND granted AND database = "
        "(SELECT oid FROM pg_database WHERE datname = current_database())");
}

// CheckLeadership until it says something other than "unreachable" (the first call after
// a cut finds the session broken; the next reconnects).
absl::Status SettledLeadership(PostgresJobStore& store) {
  absl::Status s;
  for (int i = 0; i < 3; ++i) {
    s = store.CheckLeadership();
    if (s.code() != absl::StatusCode::kUnavailable) break;
  }
  return s;
}

using PostgresLeaseTest = PostgresJobStoreTest;

TEST_F(PostgresLeaseTest, OneCoordinatorLeadsAndTheStandbyTakesOverWhenItGoes) {
  auto leader = *PostgresJobStore::Open({url_});
  auto standby = *PostgresJobStore::Open({url_});
  ASSERT_TRUE(leader->WaitForLeadership(absl::Milliseconds(100), [] { return false; }).ok());
  int polls = 0;
  auto waited = standby->WaitForLeadership(absl::Milliseconds(100), [&] { return ++polls >= 5; });
  EXPECT_EQ(waited.code(), absl::StatusCode::kCancelled) << waited;
  // The leader's process ends: its session, and with it the lease.
  leader.reset();
  const auto began = absl::Now();
  ASSERT_TRUE(standby->WaitForLeadership(absl::Milliseconds(100), [] { return false; }).ok());
  EXPECT_LT(absl::Now() - began, absl::Seconds(2));
  EXPECT_TRUE(standby->CheckLeadership().ok());
  EXPECT_TRUE(standby->CreateJob(NewJob("after takeover"), {}).ok());
}

TEST_F(PostgresLeaseTest, ADeposedLeaderWritesNothing) {
  auto old_leader = *PostgresJobStore::Open({url_});
  auto standby = *PostgresJobStore::Open({url_});
  ASSERT_TRUE(old_leader->WaitForLeadership(absl::Milliseconds(100), [] { return false; }).ok());
  ASSERT_TRUE(old_leader->CreateJob(NewJob("led"), {}).ok());
  CutTheLeadersSession(url_);
  ASSERT_TRUE(standby->WaitForLeadership(absl::Milliseconds(100), [] { return false; }).ok());
  EXPECT_EQ(SettledLeadership(*old_leader).code(), absl::StatusCode::kFailedPrecondition);
  auto refused = old_leader->CreateJob(NewJob("split brain"), {});
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition) << refused.status();
  EXPECT_NE(refused.status().message().find("leader lease"), absl::string_view::npos);
  JobQuery all;
  auto page = standby->ListJobs(all);
  ASSERT_EQ(page->jobs.size(), 1u);
  EXPECT_EQ(page->jobs[0].spec().name(), "led");
}

TEST_F(PostgresLeaseTest, ALeaderThatReconnectsWithNoRivalKeepsLeading) {
  auto leader = *PostgresJobStore::Open({url_});
  ASSERT_TRUE(leader->WaitForLeadership(absl::Milliseconds(100), [] { return false; }).ok());
  CutTheLeadersSession(url_);
  EXPECT_TRUE(SettledLeadership(*leader).ok());
  EXPECT_TRUE(leader->CreateJob(NewJob("still leading"), {}).ok());
  auto rival = *PostgresJobStore::Open({url_});
  int polls = 0;
  EXPECT_EQ(rival->WaitForLeadership(absl::Milliseconds(50), [&] { return ++polls >= 3; }).code(),
            absl::StatusCode::kCancelled);
}

}  // namespace
}  // namespace stoke::server
