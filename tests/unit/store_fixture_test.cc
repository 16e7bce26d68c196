// Stores written by a released Stoke open in this one with every job intact: an SQLite
// file (schema version 2) and a pg_dump of a PostgreSQL store (schema version 1), both
// made by tests/fixtures/make-store-fixtures.sh with the coordinator and CLI of that
// release. Whatever the schema becomes, these files must keep reading back.
#include <gtest/gtest.h>

#include <filesystem>

#include "server/store/postgres_job_store.h"
#include "server/store/sqlite_job_store.h"
#include "tests/support/store_factories.h"
#include "tests/support/temp_dir.h"

namespace stoke::server {
namespace {

using stoke::testing::FindPostgresBinDir;
using stoke::testing::SharedPostgresServer;
using stoke::testing::TempDir;

struct ExpectedJob {
  const char* id;
  const char* name;
  v1::JobState state;
};

// What make-store-fixtures.sh submitted, newest last.
constexpr ExpectedJob kFixtureJobs[] = {
    {"1", "fixture-first", v1::JOB_STATE_CANCELLED},
    {"2", "fixture-second", v1::JOB_STATE_PENDING},
    {"3", "fixture-third", v1::JOB_STATE_PENDING},
};

void ExpectEveryFixtureJob(JobStore& store) {
  JobQuery all;
  all.limit = 100;
  auto page = store.ListJobs(all);
  ASSERT_TRUE(page.ok()) << page.status();
  ASSERT_EQ(page->jobs.size(), std::size(kFixtureJobs));
  for (const ExpectedJob& expected : kFixtureJobs) {
    auto job = store.GetJob(expected.id);
    ASSERT_TRUE(job.ok()) << job.status();
    EXPECT_EQ(job->spec().name(), expected.name);
    EXPECT_EQ(job->state(), expected.state) << expected.name;
    // Every event from the first on, and nothing after the job's last.
    auto events = store.ReadEvents(expected.id, 1, 1000);
    ASSERT_TRUE(events.ok()) << events.status();
    ASSERT_FALSE(events->empty()) << expected.name;
    EXPECT_EQ(events->front().seq(), 1u);
    EXPECT_EQ(events->back().seq(), job->last_event_seq()) << expected.name;
  }
  // The submissions the CLI retried-safely (request ids) still resolve.
  auto first = store.GetJob("1");
  ASSERT_TRUE(first.ok());
  if (!first->request_id().empty()) {
    EXPECT_EQ(store.FindJobByRequestId(first->request_id())->id(), "1");
  }
  // And the store takes new jobs after the old ones.
  v1::Job next;
  next.mutable_spec()->set_name("after-upgrade");
  auto created = store.CreateJob(next, {});
  ASSERT_TRUE(created.ok()) << created.status();
  EXPECT_EQ(created->id(), "4");
}

TEST(StoreFixtures, AnSqliteFileOfTheReleasedSchemaReadsBackEveryJob) {
  TempDir dir;
  // Opening may migrate the file: work on a copy, never on the committed fixture.
  std::filesystem::copy_file(STOKE_FIXTURES_DIR "/sqlite-schema-v2.db", dir.File("stoke.db"));
  auto store = SqliteJobStore::Open({dir.File("stoke.db")});
  ASSERT_TRUE(store.ok()) << store.status();
  ExpectEveryFixtureJob(**store);
}

TEST(StoreFixtures, APostgresDumpOfTheReleasedSchemaReadsBackEveryJob) {
  if (FindPostgresBinDir().empty()) {
    GTEST_SKIP() << "PostgreSQL server binaries not found: install Debian's postgresql "
                    "(scripts/setup-deps.sh)";
  }
  std::string error;
  auto* server = SharedPostgresServer(&error);
  ASSERT_NE(server, nullptr) << error;
  const std::string url = server->CreateDatabase("fixture", &error);
  ASSERT_FALSE(url.empty()) << error;
  ASSERT_TRUE(server->LoadSql("fixture", STOKE_FIXTURES_DIR "/postgres-schema-v1.sql", &error))
      << error;
  auto store = PostgresJobStore::Open({url});
  ASSERT_TRUE(store.ok()) << store.status();
  ExpectEveryFixtureJob(**store);
}

}  // namespace
}  // namespace stoke::server
