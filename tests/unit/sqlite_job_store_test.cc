// What only the SQLite job store does, on real files: a full store refuses writes and
// loses nothing, damaged, emptied or newer files are refused, version 1 files migrate,
// backups. What every store does is in job_store_test.cc.
#include "server/store/sqlite_job_store.h"

#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include "tests/support/store_records.h"
#include "tests/support/temp_dir.h"

namespace stoke::server {
namespace {

using stoke::testing::NewJob;
using stoke::testing::StateEvent;
using stoke::testing::TempDir;

TEST(SqliteJobStore, FullStoreRefusesWritesAndKeepsWhatItHad) {
  TempDir dir;
  // A size cap makes SQLite fail the way a full disk does (SQLITE_FULL).
  auto store = *SqliteJobStore::Open({dir.File("stoke.db"), 64 * 1024});
  v1::Job big = NewJob("padding");
  big.mutable_spec()->mutable_model()->mutable_mlp()->mutable_hidden()->Resize(2000, 7);
  absl::Status failure;
  int stored = 0;
  for (int i = 0; i < 1000 && failure.ok(); ++i) {
    auto job = store->CreateJob(big, {StateEvent(1, v1::JOB_STATE_PENDING)});
    if (job.ok()) {
      ++stored;
    } else {
      failure = job.status();
    }
  }
  ASSERT_FALSE(failure.ok()) << "the store never filled up";
  EXPECT_EQ(failure.code(), absl::StatusCode::kResourceExhausted) << failure;
  EXPECT_NE(failure.message().find("full"), absl::string_view::npos) << failure;
  ASSERT_GT(stored, 0);
  // Every job stored before the failure is intact, and a failed commit changed nothing.
  for (int id = 1; id <= stored; ++id) {
    auto job = store->GetJob(std::to_string(id));
    ASSERT_TRUE(job.ok()) << job.status();
    EXPECT_EQ(job->spec().model().mlp().hidden_size(), 2000);
  }
  JobQuery all;
  all.limit = 10000;
  EXPECT_EQ(store->ListJobs(all)->jobs.size(), static_cast<size_t>(stored));
}

// Every job's spec, paths and commands: readable by the coordinator's user alone, the
// write-ahead log too.
TEST(SqliteJobStore, ANewStoreIsItsUsersAlone) {
  TempDir dir;
  auto store = *SqliteJobStore::Open({dir.File("stoke.db")});
  ASSERT_TRUE(store->CreateJob(NewJob("private"), {StateEvent(1, v1::JOB_STATE_PENDING)}).ok());
  for (const char* name : {"stoke.db", "stoke.db-wal"}) {
    struct stat st;
    ASSERT_EQ(stat(dir.File(name).c_str(), &st), 0) << name;
    EXPECT_EQ(st.st_mode & 0777, 0600u) << name;
  }
}

TEST(SqliteJobStore, RefusesAFileFromANewerSchema) {
  TempDir dir;
  {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(dir.File("stoke.db").c_str(), &db), SQLITE_OK);
    sqlite3_exec(db, "PRAGMA user_version = 99", nullptr, nullptr, nullptr);
    sqlite3_close(db);
  }
  auto store = SqliteJobStore::Open({dir.File("stoke.db")});
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(store.status().message().find("schema version 99"), absl::string_view::npos);
}

// A file as Stoke's schema version 1 wrote it (jobs and events, no owners, no audit):
// opened by this version, every job reads back, and the new tables work.
TEST(SqliteJobStore, MigratesAVersionOneFileKeepingEveryJob) {
  TempDir dir;
  {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(dir.File("stoke.db").c_str(), &db), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(db, R"sql(
      CREATE TABLE jobs (id INTEGER PRIMARY KEY AUTOINCREMENT, state INTEGER NOT NULL,
                         job BLOB NOT NULL);
      CREATE INDEX jobs_by_state ON jobs(state, id);
      CREATE TABLE events (job_id INTEGER NOT NULL REFERENCES jobs(id), seq INTEGER NOT NULL,
                           event BLOB NOT NULL, PRIMARY KEY (job_id, seq)) WITHOUT ROWID;
      PRAGMA user_version = 1;
    )sql",
                           nullptr, nullptr, nullptr),
              SQLITE_OK);
    for (int i = 1; i <= 3; ++i) {
      v1::Job job = NewJob("old-" + std::to_string(i), v1::JOB_STATE_SUCCEEDED);
      job.set_id(std::to_string(i));
      const std::string blob = job.SerializeAsString();
      sqlite3_stmt* stmt = nullptr;
      sqlite3_prepare_v2(db, "INSERT INTO jobs(state, job) VALUES (?, ?)", -1, &stmt, nullptr);
      sqlite3_bind_int(stmt, 1, v1::JOB_STATE_SUCCEEDED);
      sqlite3_bind_blob(stmt, 2, blob.data(), static_cast<int>(blob.size()), SQLITE_TRANSIENT);
      ASSERT_EQ(sqlite3_step(stmt), SQLITE_DONE);
      sqlite3_finalize(stmt);
    }
    sqlite3_close(db);
  }
  auto store = SqliteJobStore::Open({dir.File("stoke.db")});
  ASSERT_TRUE(store.ok()) << store.status();
  for (int i = 1; i <= 3; ++i) {
    auto job = (*store)->GetJob(std::to_string(i));
    ASSERT_TRUE(job.ok()) << job.status();
    EXPECT_EQ(job->spec().name(), "old-" + std::to_string(i));
    EXPECT_EQ(job->owner(), "");
  }
  // New jobs get owners that list filters on; old ones belong to nobody.
  v1::Job mine = NewJob("new");
  mine.set_owner("alice");
  ASSERT_TRUE((*store)->CreateJob(mine, {StateEvent(1, v1::JOB_STATE_PENDING)}).ok());
  JobQuery query;
  query.owner = "alice";
  auto page = (*store)->ListJobs(query);
  ASSERT_TRUE(page.ok()) << page.status();
  ASSERT_EQ(page->jobs.size(), 1u);
  EXPECT_EQ(page->jobs[0].id(), "4");
  query.owner.clear();
  EXPECT_EQ((*store)->ListJobs(query)->jobs.size(), 4u);
}

TEST(SqliteJobStore, RefusesAFileThatIsNotADatabase) {
  TempDir dir;
  {
    std::ofstream(dir.File("stoke.db")) << "this is not sqlite, just some text that is long enough";
  }
  auto store = SqliteJobStore::Open({dir.File("stoke.db")});
  ASSERT_FALSE(store.ok());
  EXPECT_NE(store.status().message().find("stoke.db"), absl::string_view::npos) << store.status();
}

TEST(SqliteJobStore, ADamagedFileIsRefusedAtOpen) {
  TempDir dir;
  {
    auto store = *SqliteJobStore::Open({dir.File("stoke.db")});
    for (int i = 0; i < 200; ++i) {
      ASSERT_TRUE(
          store->CreateJob(NewJob(std::string(200, 'x')), {StateEvent(1, v1::JOB_STATE_PENDING)})
              .ok());
    }
  }  // closed: the log is folded into the file
  ASSERT_GT(std::filesystem::file_size(dir.File("stoke.db")), 8u * 4096);
  {
    std::fstream f(dir.File("stoke.db"), std::ios::in | std::ios::out | std::ios::binary);
    const std::string junk(100, '\x5a');  // over the b-tree page headers of pages 3 and 4
    for (int page = 2; page <= 3; ++page) {
      f.seekp(page * 4096);
      f.write(junk.data(), junk.size());
    }
  }
  auto store = SqliteJobStore::Open({dir.File("stoke.db")});
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kDataLoss) << store.status();
  EXPECT_NE(store.status().message().find(dir.File("stoke.db")), absl::string_view::npos)
      << store.status();
}

TEST(SqliteJobStore, AnEmptiedFileWithJobsBehindItIsRefused) {
  TempDir dir;
  std::filesystem::create_directories(dir.File("jobs"));
  std::ofstream(dir.File("stoke.db")).close();  // 0 bytes
  EXPECT_TRUE(CheckStoreNotEmptied(dir.File("stoke.db"), dir.File("jobs")).ok())
      << "a new data dir";
  std::filesystem::create_directories(dir.File("jobs/7/checkpoints"));
  auto s = CheckStoreNotEmptied(dir.File("stoke.db"), dir.File("jobs"));
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find(dir.File("jobs/7")), absl::string_view::npos) << s;
  EXPECT_NE(s.message().find("backup"), absl::string_view::npos) << s;
  std::filesystem::remove_all(dir.File("jobs/7"));
  std::ofstream(dir.File("stoke.db-wal")) << std::string(100, 'w');
  s = CheckStoreNotEmptied(dir.File("stoke.db"), dir.File("jobs"));
  EXPECT_NE(s.message().find(dir.File("stoke.db-wal")), absl::string_view::npos) << s;
}

TEST(SqliteJobStore, ABackupTakenWhileOpenHoldsEveryJob) {
  TempDir dir;
  auto store = *SqliteJobStore::Open({dir.File("stoke.db")});
  for (int i = 0; i < 20; ++i) {
    ASSERT_TRUE(
        store->CreateJob(NewJob("j" + std::to_string(i)), {StateEvent(1, v1::JOB_STATE_PENDING)})
            .ok());
  }
  ASSERT_TRUE(store->BackupTo(dir.File("backup.db")).ok());
  ASSERT_TRUE(store->CreateJob(NewJob("after"), {StateEvent(1, v1::JOB_STATE_PENDING)}).ok());
  auto copy = SqliteJobStore::Open({dir.File("backup.db")});
  ASSERT_TRUE(copy.ok()) << copy.status();
  JobQuery all;
  all.limit = 100;
  auto page = (*copy)->ListJobs(all);
  ASSERT_TRUE(page.ok());
  EXPECT_EQ(page->jobs.size(), 20u);
  EXPECT_EQ((*copy)->GetJob("20")->spec().name(), "j19");
}

}  // namespace
}  // namespace stoke::server
