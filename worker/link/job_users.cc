#include "worker/link/job_users.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <set>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "files/descriptor.h"
#include "files/posix_files.h"

namespace stoke::worker {
namespace {

absl::Status TableError(const std::string& path, const std::string& what) {
  return absl::InternalError(
      absl::StrCat("--job-users table ", path, ": cannot ", what, ": ", std::strerror(errno)));
}

// The whole file behind `fd`, from its start.
bool ReadAll(int fd, std::string* text) {
  if (lseek(fd, 0, SEEK_SET) < 0) return false;
  char buffer[8192];
  for (ssize_t n; (n = read(fd, buffer, sizeof buffer)) != 0;) {
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    text->append(buffer, static_cast<size_t>(n));
  }
  return true;
}

bool WriteAll(int fd, const std::string& text) {
  for (size_t done = 0; done < text.size();) {
    const ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    done += static_cast<size_t>(n);
  }
  return true;
}

// The uid already given to `escaped_owner` in `table` (0: none), and every uid taken.
uid_t FindOwner(const std::string& table, const std::string& escaped_owner,
                std::set<uid_t>* taken) {
  uid_t found = 0;
  for (absl::string_view line : absl::StrSplit(table, '\n', absl::SkipEmpty())) {
    const size_t tab = line.find('\t');
    uint32_t uid = 0;
    if (tab == absl::string_view::npos || !absl::SimpleAtoi(line.substr(0, tab), &uid)) continue;
    taken->insert(uid);
    if (line.substr(tab + 1) == escaped_owner) found = uid;
  }
  return found;
}

JobUser UserOf(uid_t uid) { return JobUser{absl::StrCat("stoke-job-", uid), uid, uid, "/"}; }

}  // namespace

absl::StatusOr<UidRange> ParseUidRange(const std::string& text) {
  const std::vector<std::string> ends = absl::StrSplit(text, '-');
  uint32_t first = 0, last = 0;
  if (ends.size() != 2 || !absl::SimpleAtoi(ends[0], &first) || !absl::SimpleAtoi(ends[1], &last)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--job-users ", text, ": expected a range of uids, FIRST-LAST (61000-61999)"));
  }
  if (first == 0 || last < first) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--job-users ", text, ": the range must start above 0 (root) and not run backwards"));
  }
  return UidRange{first, last};
}

absl::StatusOr<JobUser> JobUserForOwner(const std::string& table_path, UidRange range,
                                        const std::string& owner) {
  std::string error;
  const std::string folder = table_path.substr(0, table_path.rfind('/'));
  if (!folder.empty() && !files::MakeDirectories(folder, &error)) {
    return absl::InternalError(absl::StrCat("--job-users table ", table_path, ": ", error));
  }
  // Every worker of the host reads and appends under this lock, released as it closes: no
  // uid is given twice.
  const files::Descriptor table_file(
      open(table_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600));
  const int fd = table_file.get();
  if (fd < 0) return TableError(table_path, "open it");
  if (flock(fd, LOCK_EX) != 0) return TableError(table_path, "lock it");
  std::string table;
  if (!ReadAll(fd, &table)) return TableError(table_path, "read it");
  // Escaped: an owner's name may hold any byte, the table's lines may not.
  const std::string escaped = absl::CEscape(owner.empty() ? "-" : owner);
  std::set<uid_t> taken;
  if (const uid_t uid = FindOwner(table, escaped, &taken); uid != 0) return UserOf(uid);
  uid_t uid = range.first;
  while (taken.count(uid) > 0 && uid < range.last) ++uid;
  if (taken.count(uid) > 0) {
    return absl::ResourceExhaustedError(absl::StrCat("--job-users ", range.first, "-", range.last,
                                                     ": every uid is taken by an owner (",
                                                     table_path, "); give a larger range"));
  }
  // A line cut short (a crash mid-write) is ended first, so that the new one stands alone.
  const std::string line =
      absl::StrCat(table.empty() || table.back() == '\n' ? "" : "\n", uid, "\t", escaped, "\n");
  if (lseek(fd, 0, SEEK_END) < 0 || !WriteAll(fd, line) || fsync(fd) != 0) {
    return TableError(table_path, "write it");
  }
  return UserOf(uid);
}

}  // namespace stoke::worker
