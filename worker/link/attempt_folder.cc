#include "worker/link/attempt_folder.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <vector>

#include "absl/strings/str_cat.h"
#include "files/descriptor.h"
#include "files/posix_files.h"
#include "spec/code_bundle.h"

namespace stoke::worker {
namespace {

using files::Descriptor;

// The path that reaches this very folder, whatever is renamed above it.
std::string ThroughDescriptor(const Descriptor& folder) {
  return absl::StrCat("/proc/self/fd/", folder.get());
}

absl::Status Failed(const std::string& what, const std::string& path) {
  return absl::InternalError(absl::StrCat("cannot ", what, " ", path, ": ", std::strerror(errno)));
}

// Moves `name` (whatever it is: a link, a file, an old folder) out of the way, beside it.
bool MoveAside(int parent, const std::string& name) {
  static int count = 0;
  const std::string aside =
      absl::StrCat(name, ".moved-", std::time(nullptr), "-", getpid(), "-", ++count);
  return renameat(parent, name.c_str(), parent, aside.c_str()) == 0;
}

// The folder `name` inside `parent`, made if missing (handed to `user` only when made
// here); a link or file in its place is moved aside first. `fresh`: an existing folder
// is moved aside too, so that the one returned holds nothing anyone else put there.
absl::StatusOr<Descriptor> OpenFolder(const Descriptor& parent, const std::string& name,
                                      mode_t mode, bool fresh, const std::string& shown) {
  for (int tries = 0; tries < 3; ++tries) {
    if (fresh && faccessat(parent.get(), name.c_str(), F_OK, AT_SYMLINK_NOFOLLOW) == 0 &&
        !MoveAside(parent.get(), name)) {
      return Failed("move aside", shown);
    }
    if (mkdirat(parent.get(), name.c_str(), mode) != 0 && errno != EEXIST) {
      return Failed("create", shown);
    }
    Descriptor folder(
        openat(parent.get(), name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (folder.get() >= 0) return folder;
    // ELOOP: a link; ENOTDIR: a file. Neither is followed; either is moved aside.
    if ((errno != ELOOP && errno != ENOTDIR) || !MoveAside(parent.get(), name)) {
      return Failed("open", shown);
    }
  }
  return absl::InternalError(absl::StrCat("cannot make ", shown, ": it keeps being replaced"));
}

// Hands everything beneath `folder` to `user`, deepest first: each folder stays root's,
// and so closed to the user, until what it holds is handed over.
absl::Status GiveContents(const Descriptor& folder, const JobUser& user, int depth) {
  if (depth > 64) return absl::InternalError("code folders nest too deep");
  DIR* dir = fdopendir(dup(folder.get()));
  if (dir == nullptr) return Failed("list", "a code folder");
  std::vector<std::string> names;
  while (const dirent* entry = readdir(dir)) {
    const std::string name = entry->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  closedir(dir);
  for (const std::string& name : names) {
    Descriptor child(
        openat(folder.get(), name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (child.get() >= 0) {
      if (auto s = GiveContents(child, user, depth + 1); !s.ok()) return s;
      if (fchown(child.get(), user.uid, user.gid) != 0) return Failed("hand over", name);
    } else if (fchownat(folder.get(), name.c_str(), user.uid, user.gid, AT_SYMLINK_NOFOLLOW) != 0) {
      return Failed("hand over", name);
    }
  }
  return absl::OkStatus();
}

// The job folder (or the scratch folder) and its trusted parent, which the operator made.
absl::StatusOr<Descriptor> OpenBase(const std::string& path, const std::optional<JobUser>& user) {
  const size_t slash = path.rfind('/');
  const std::string parent_path = slash == 0 ? "/" : path.substr(0, slash);
  std::string error;
  if (!files::MakeDirectories(parent_path, &error)) {
    return absl::InternalError(absl::StrCat("cannot create ", parent_path, ": ", error));
  }
  Descriptor parent(open(parent_path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (parent.get() < 0) return Failed("open", parent_path);
  auto base = OpenFolder(parent, path.substr(slash + 1), 0700, false, path);
  // The job folder's entry lies in the operator's folder, where the user cannot swap it:
  // handing this very folder over is safe even when it was there before.
  if (base.ok() && user &&
      (fchown(base->get(), user->uid, user->gid) != 0 || fchmod(base->get(), 0700) != 0)) {
    return Failed("hand over", path);
  }
  return base;
}

}  // namespace

absl::StatusOr<AttemptFolders> PrepareAttemptFolder(const v1::Assignment& a,
                                                    const std::string& scratch_dir,
                                                    const std::optional<JobUser>& user) {
  const bool scratch = a.job_dir().empty();
  const std::string base_path =
      scratch ? absl::StrCat(scratch_dir, "/stoke-", a.job_id(), "-", a.attempt(), "-", getpid())
              : a.job_dir();
  auto base = OpenBase(base_path, user);
  if (!base.ok()) return base.status();
  const std::string attempt = absl::StrCat(a.attempt());
  const AttemptFolders paths{base_path,
                             absl::StrCat(base_path, "/attempts/", attempt, "/rank-", a.rank()),
                             base_path + "/checkpoints"};
  auto checkpoints = OpenFolder(*base, "checkpoints", 0755, false, paths.checkpoints);
  if (!checkpoints.ok()) return checkpoints.status();
  auto attempts = OpenFolder(*base, "attempts", 0755, false, base_path + "/attempts");
  if (!attempts.ok()) return attempts.status();
  auto numbered = OpenFolder(*attempts, attempt, 0755, false, base_path + "/attempts/" + attempt);
  if (!numbered.ok()) return numbered.status();
  auto folder = OpenFolder(*numbered, absl::StrCat("rank-", a.rank()), 0755, true, paths.rank);
  if (!folder.ok()) return folder.status();
  // Written through the descriptor's own path while the folder is still root's alone.
  if (a.code().files_size() > 0) {
    if (auto s = spec::WriteCodeBundle(a.code(), ThroughDescriptor(*folder) + "/code"); !s.ok())
      return s;
  }
  if (user) {
    if (auto s = GiveContents(*folder, *user, 0); !s.ok()) return s;
    // Reached by descriptor, not by path: handing these over cannot be redirected. Each
    // is a folder inside the user's own job folder, which only the user could have put
    // there (a folder owned by another cannot be moved in).
    for (const Descriptor* made : {&*checkpoints, &*attempts, &*numbered, &*folder}) {
      if (fchown(made->get(), user->uid, user->gid) != 0) return Failed("hand over", paths.rank);
    }
  }
  return paths;
}

}  // namespace stoke::worker
