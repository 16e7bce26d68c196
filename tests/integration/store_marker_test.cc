// A store emptied, rolled back or replaced behind the coordinator's back: a stoke.db truncated to 0
// bytes after jobs were queued is refused at start, naming the marker and how to go on, instead of
// served empty with every queued job silently lost. Real coordinator processes.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "tests/support/coordinator_process.h"
#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"

namespace stoke::testing {
namespace {

v1::JobSpec QueuedJob() {
  v1::JobSpec spec;
  spec.mutable_model()->mutable_mlp()->add_hidden(8);
  spec.mutable_data()->mutable_synthetic()->set_features(4);
  spec.mutable_training()->set_steps(10);
  spec.mutable_training()->set_batch_size(8);
  return spec;
}

TEST(StoreMarker, AnEmptiedStoreIsRefusedAndAFreshStartIsTheOperatorsChoice) {
  TempDir dir;
  CoordinatorProcess::Options options{dir.path()};
  options.local_workers = "0";  // the jobs stay queued
  auto coordinator = CoordinatorProcess::Start(options);
  ASSERT_NE(coordinator, nullptr);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(coordinator->client().SubmitJob(QueuedJob()).ok());
  EXPECT_EQ(coordinator->Stop(), 0);

  // The disk gives back an empty file where the store was.
  ASSERT_EQ(truncate(dir.File("stoke.db").c_str(), 0), 0);
  std::remove(dir.File("stoke.db-wal").c_str());
  std::remove(dir.File("stoke.db-shm").c_str());
  const CommandResult refused =
      RunCommand({STOKE_COORDINATOR_BINARY, "--address", "127.0.0.1:0", "--data-dir", dir.path(),
                  "--local-workers", "0", "--metrics-address", ""});
  EXPECT_NE(refused.exit_code, 0);
  const std::string said = refused.out + refused.err;
  EXPECT_NE(said.find(dir.File("stoke.db") + " holds no jobs, but " + dir.File("store.marker") +
                      " records that it held jobs up to id 3"),
            std::string::npos)
      << said;

  // Starting afresh is a decision: remove the marker.
  ASSERT_EQ(std::remove(dir.File("store.marker").c_str()), 0);
  coordinator = CoordinatorProcess::Start(options);
  ASSERT_NE(coordinator, nullptr);
  auto listed = coordinator->client().ListJobs(v1::ListJobsRequest());
  ASSERT_TRUE(listed.ok()) << listed.status();
  EXPECT_EQ(listed->jobs_size(), 0);
}

// The store's files copied from `from` over those in `to` (a restore from elsewhere).
void CopyStore(const TempDir& from, const TempDir& to) {
  for (const char* name : {"stoke.db", "stoke.db-wal", "stoke.db-shm"}) {
    std::remove(to.File(name).c_str());
    if (access(from.File(name).c_str(), F_OK) == 0) {
      ASSERT_EQ(RunCommand({"/bin/cp", from.File(name), to.File(name)}).exit_code, 0);
    }
  }
}

CommandResult StartOn(const TempDir& dir) {
  return RunCommand({STOKE_COORDINATOR_BINARY, "--address", "127.0.0.1:0", "--data-dir", dir.path(),
                     "--local-workers", "0", "--metrics-address", ""});
}

// An older copy of the store, or another coordinator's, restored in its place: both are
// refused, naming what the marker records. A link planted where the marker is written
// is not followed.
TEST(StoreMarker, AnOlderCopyOrAnotherCoordinatorsStoreIsRefused) {
  TempDir dir, older, other;
  std::ofstream(dir.File("victim")) << "untouched";
  ASSERT_EQ(symlink(dir.File("victim").c_str(), dir.File("store.marker.tmp").c_str()), 0);
  CoordinatorProcess::Options options{dir.path()};
  options.local_workers = "0";
  auto coordinator = CoordinatorProcess::Start(options);
  ASSERT_NE(coordinator, nullptr);
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(coordinator->client().SubmitJob(QueuedJob()).ok());
  EXPECT_EQ(coordinator->Stop(), 0);
  CopyStore(dir, older);
  coordinator = CoordinatorProcess::Start(options);
  ASSERT_NE(coordinator, nullptr);
  ASSERT_TRUE(coordinator->client().SubmitJob(QueuedJob()).ok());
  EXPECT_EQ(coordinator->Stop(), 0);
  std::ifstream victim(dir.File("victim"));
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(victim), {}), "untouched");

  CopyStore(older, dir);
  CommandResult refused = StartOn(dir);
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_NE((refused.out + refused.err)
                .find(dir.File("stoke.db") + " holds jobs up to id 2, but " +
                      dir.File("store.marker") + " records that it held jobs up to id 3"),
            std::string::npos)
      << refused.out << refused.err;

  // Another coordinator's store of as many jobs, submitted at other times.
  CoordinatorProcess::Options other_options{other.path()};
  other_options.local_workers = "0";
  auto elsewhere = CoordinatorProcess::Start(other_options);
  ASSERT_NE(elsewhere, nullptr);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(elsewhere->client().SubmitJob(QueuedJob()).ok());
  EXPECT_EQ(elsewhere->Stop(), 0);
  CopyStore(other, dir);
  refused = StartOn(dir);
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_NE((refused.out + refused.err)
                .find(dir.File("stoke.db") + "'s job 3 is not the one " + dir.File("store.marker") +
                      " records"),
            std::string::npos)
      << refused.out << refused.err;
}

}  // namespace
}  // namespace stoke::testing
