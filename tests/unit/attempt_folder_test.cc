// The folders of an attempt of user code, made by a root worker in a job folder that the
// job's user can write: a swapper running as that user, replacing folders with links to a
// root-owned folder as fast as it can through 20 attempts, never gets a root-owned file
// handed over or written. And the job users: one uid per owner, kept, never shared.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "files/posix_files.h"
#include "worker/link/attempt_folder.h"
#include "worker/link/job_users.h"

namespace stoke::worker {
namespace {

constexpr uid_t kUser = 61000;

// A folder in /tmp that the job user may traverse (mkdtemp makes 0700 ones), removed after.
class OpenTempDir {
 public:
  OpenTempDir() {
    char pattern[] = "/tmp/stoke-attempt-test.XXXXXX";
    path_ = mkdtemp(pattern);
    chmod(path_.c_str(), 0755);
  }
  ~OpenTempDir() { files::RemoveTree(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

struct stat Lstat(const std::string& path) {
  struct stat st {};
  lstat(path.c_str(), &st);
  return st;
}

// As the job user, for `seconds`: replaces each folder a worker walks through with a link
// to `victim`, in every order, again and again.
[[noreturn]] void Swap(const std::string& job, const std::string& victim, int seconds) {
  if (setgid(kUser) != 0 || setuid(kUser) != 0) _exit(3);
  const time_t end = time(nullptr) + seconds;
  for (int round = 0; time(nullptr) < end; ++round) {
    const std::string attempts = job + "/attempts";
    for (int n = 1; n <= 21; ++n) {
      const std::string numbered = absl::StrCat(attempts, "/", n);
      rename((numbered + "/rank-0").c_str(), (numbered + "/rank-0.gone").c_str());
      symlink(victim.c_str(), (numbered + "/rank-0").c_str());
      if (round % 3 == 0) {
        rename(numbered.c_str(), (numbered + ".gone").c_str());
        symlink(victim.c_str(), numbered.c_str());
      }
    }
    if (round % 5 == 0) {
      rename(attempts.c_str(), (attempts + ".gone").c_str());
      symlink(victim.c_str(), attempts.c_str());
      rename((job + "/checkpoints").c_str(), (job + "/checkpoints.gone").c_str());
      symlink(victim.c_str(), (job + "/checkpoints").c_str());
    }
  }
  _exit(0);
}

TEST(AttemptFolder, ASwappingJobUserNeverGetsARootFileThroughTwentyAttempts) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root, as a worker with job users runs";
  OpenTempDir dir;
  const std::string victim = dir.path() + "/victim", job = dir.path() + "/jobs/7";
  ASSERT_EQ(mkdir(victim.c_str(), 0700), 0);
  std::ofstream(victim + "/secret") << "root's own";
  chmod((victim + "/secret").c_str(), 0600);
  const JobUser user{"stoke-job-61000", kUser, kUser, "/"};

  v1::Assignment assignment;
  assignment.set_job_id("7");
  assignment.set_job_dir(job);
  auto* code = assignment.mutable_code()->add_files();
  code->set_path("pkg/model.py");
  code->set_content("print('mine')\n");
  // The first attempt makes the job folder the user's, as it would be after a first run.
  assignment.set_attempt(1);
  ASSERT_TRUE(PrepareAttemptFolder(assignment, dir.path(), user).ok());

  const pid_t swapper = fork();
  if (swapper == 0) Swap(job, victim, 8);
  int prepared = 0;
  for (uint32_t attempt = 2; attempt <= 21; ++attempt) {
    // Time for the swapper to plant its links between attempts, as well as during them.
    usleep(20 * 1000);
    assignment.set_attempt(attempt);
    const auto folders = PrepareAttemptFolder(assignment, dir.path(), user);
    if (!folders.ok()) continue;  // refusing is fine; being redirected is not
    ++prepared;
  }
  kill(swapper, SIGKILL);
  waitpid(swapper, nullptr, 0);

  EXPECT_GT(prepared, 0);
  for (const std::string& path : {victim, victim + "/secret"}) {
    const struct stat st = Lstat(path);
    EXPECT_EQ(st.st_uid, 0u) << path << " was handed to the job user";
    EXPECT_EQ(st.st_mode & 07777, path == victim ? 0700u : 0600u) << path;
  }
  EXPECT_EQ(files::ListDirectory(victim).size(), 1u) << "something was written into " << victim;
}

TEST(AttemptFolder, TheRankFolderAndItsCodeAreTheUsersAndFresh) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root, as a worker with job users runs";
  OpenTempDir dir;
  const JobUser user{"stoke-job-61000", kUser, kUser, "/"};
  v1::Assignment assignment;
  assignment.set_job_id("8");
  assignment.set_attempt(1);
  assignment.set_job_dir(dir.path() + "/jobs/8");
  auto* code = assignment.mutable_code()->add_files();
  code->set_path("pkg/model.py");
  code->set_content("print('mine')\n");
  auto folders = PrepareAttemptFolder(assignment, dir.path(), user);
  ASSERT_TRUE(folders.ok()) << folders.status();
  EXPECT_EQ(folders->rank, dir.path() + "/jobs/8/attempts/1/rank-0");
  for (const std::string& path : {dir.path() + "/jobs/8", folders->rank, folders->checkpoints,
                                  folders->rank + "/code/pkg/model.py"}) {
    EXPECT_EQ(Lstat(path).st_uid, kUser) << path;
  }
  EXPECT_EQ(Lstat(dir.path() + "/jobs/8").st_mode & 0777, 0700u) << "other users may look in";
  // A retry of the same attempt gets a fresh folder; what was there is moved aside.
  std::ofstream(folders->rank + "/left-behind") << "x";
  folders = PrepareAttemptFolder(assignment, dir.path(), user);
  ASSERT_TRUE(folders.ok()) << folders.status();
  EXPECT_FALSE(files::Exists(folders->rank + "/left-behind"));
}

TEST(JobUsers, EachOwnerGetsAUidOfItsOwnAndKeepsIt) {
  OpenTempDir dir;
  const std::string table = dir.path() + "/state/job-users";
  const UidRange range{61000, 61002};
  const auto alice = JobUserForOwner(table, range, "alice");
  const auto bob = JobUserForOwner(table, range, "bob\twith\na newline");
  ASSERT_TRUE(alice.ok() && bob.ok()) << alice.status() << bob.status();
  EXPECT_EQ(alice->uid, 61000u);
  EXPECT_EQ(bob->uid, 61001u);
  EXPECT_EQ(alice->gid, alice->uid);
  // Read back from the table, as another worker of the host or a restarted one would.
  EXPECT_EQ(JobUserForOwner(table, range, "alice")->uid, 61000u);
  EXPECT_EQ(JobUserForOwner(table, range, "bob\twith\na newline")->uid, 61001u);
  EXPECT_EQ(JobUserForOwner(table, range, "carol")->uid, 61002u);
  const auto dave = JobUserForOwner(table, range, "dave");
  EXPECT_EQ(dave.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(dave.status().message().find("61000-61002"), std::string::npos) << dave.status();
}

TEST(JobUsers, ARangeThatIncludesRootOrRunsBackwardsIsRefused) {
  EXPECT_TRUE(ParseUidRange("61000-61999").ok());
  for (const char* bad : {"0-10", "61999-61000", "61000", "a-b", "61000-"}) {
    const auto range = ParseUidRange(bad);
    EXPECT_FALSE(range.ok()) << bad;
    EXPECT_NE(range.status().message().find("--job-users"), std::string::npos) << bad;
  }
}

}  // namespace
}  // namespace stoke::worker
