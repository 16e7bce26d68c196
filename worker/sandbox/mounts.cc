#include "worker/sandbox/mounts.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>

#include "absl/strings/str_cat.h"

#ifndef SYS_mount_setattr
#define SYS_mount_setattr 442  // the same number on every architecture (Linux 5.12)
#endif

namespace stoke::sandbox {
namespace {

// The host's system folders every program needs (the interpreter, its libraries, /etc's
// resolver and locale files); everything else of the host stays out unless bound.
constexpr const char* kSystemTrees[] = {"/usr",   "/bin",    "/sbin", "/lib", "/lib32",
                                        "/lib64", "/libx32", "/etc",  "/opt"};
// Where the new root is assembled: a tmpfs mounted over the host's /tmp in this process's
// own mount namespace. The host's files are all held open before it goes up, so that
// nothing it covers is lost (a bind from the host's /tmp still works).
constexpr const char* kStaging = "/tmp";

std::string Failed(const std::string& what) { return absl::StrCat(what, ": ", strerror(errno)); }

// A host file or folder the new root shows, held open (O_PATH) before the host is hidden.
struct Source {
  std::string path;  // where it goes inside: the same path
  int fd = -1;
  bool directory = true;
  bool writable = false;
  std::string link;  // not empty: a symlink to recreate instead (/bin -> usr/bin)
};

// The sources, closed when the root is built (or its building failed).
struct Sources {
  std::vector<Source> system, binds;
  Source dev, sys;
  int old_root = -1;
  ~Sources() {
    for (const auto* list : {&system, &binds}) {
      for (const Source& source : *list) {
        if (source.fd >= 0) close(source.fd);
      }
    }
    for (int fd : {dev.fd, sys.fd, old_root}) {
      if (fd >= 0) close(fd);
    }
  }
};

bool OpenSource(const std::string& path, bool writable, Source* source) {
  source->path = path;
  source->writable = writable;
  source->fd = open(path.c_str(), O_PATH | O_CLOEXEC);
  struct stat st;
  if (source->fd < 0 || fstat(source->fd, &st) != 0) return false;
  source->directory = S_ISDIR(st.st_mode);
  return true;
}

bool OpenHostSources(const MountPlan& plan, Sources* sources, std::string* error) {
  for (const char* tree : kSystemTrees) {
    struct stat st;
    if (lstat(tree, &st) != 0) continue;  // /libx32 and /lib32 exist on few hosts
    Source source;
    source.path = tree;
    if (S_ISLNK(st.st_mode)) {
      char target[4096];
      const ssize_t n = readlink(tree, target, sizeof target - 1);
      if (n <= 0) continue;
      source.link.assign(target, static_cast<size_t>(n));
    } else if (!OpenSource(tree, false, &source)) {
      *error = Failed(absl::StrCat("cannot open ", tree));
      return false;
    }
    sources->system.push_back(source);
  }
  if (!OpenSource("/dev", true, &sources->dev) || !OpenSource("/sys", false, &sources->sys)) {
    *error = Failed("cannot open /dev or /sys");
    return false;
  }
  for (bool writable : {false, true}) {
    for (const std::string& path : writable ? plan.read_write : plan.read_only) {
      sources->binds.emplace_back();
      if (!OpenSource(path, writable, &sources->binds.back())) {
        *error =
            Failed(absl::StrCat("cannot bind ", path, writable ? " read-write" : " read-only"));
        return false;
      }
    }
  }
  // In path order: a folder's bind goes up before the binds beneath it, which stay on top.
  std::stable_sort(sources->binds.begin(), sources->binds.end(),
                   [](const Source& a, const Source& b) { return a.path < b.path; });
  return true;
}

// Read-only, with every mount beneath it (mount_setattr, Linux 5.12); on older kernels
// only the top mount, its other flags (nosuid, nodev, noexec) kept.
bool SetReadOnly(const std::string& path, bool recursive) {
  struct {
    uint64_t attr_set, attr_clr, propagation, userns_fd;
  } attr = {1 /* MOUNT_ATTR_RDONLY */, 0, 0, 0};
  const unsigned flags = recursive ? 0x8000u /* AT_RECURSIVE */ : 0u;
  if (syscall(SYS_mount_setattr, AT_FDCWD, path.c_str(), flags, &attr, sizeof attr) == 0) {
    return true;
  }
  if (errno != ENOSYS) return false;
  struct statvfs vfs;
  if (statvfs(path.c_str(), &vfs) != 0) return false;
  uint64_t kept = 0;
  if (vfs.f_flag & ST_NOSUID) kept |= MS_NOSUID;
  if (vfs.f_flag & ST_NODEV) kept |= MS_NODEV;
  if (vfs.f_flag & ST_NOEXEC) kept |= MS_NOEXEC;
  return mount(nullptr, path.c_str(), nullptr, MS_REMOUNT | MS_BIND | MS_RDONLY | kept, nullptr) ==
         0;
}

// The place a bind goes: its missing parents made as folders, then itself (a folder, or
// an empty file for a file's bind). Under a bound tree the place already exists.
bool MakeMountPoint(const std::string& path, bool directory, std::string* error) {
  for (size_t slash = path.find('/', 1); slash != std::string::npos;
       slash = path.find('/', slash + 1)) {
    if (mkdir(path.substr(0, slash).c_str(), 0755) != 0 && errno != EEXIST) break;
  }
  bool made = false;
  if (directory) {
    made = mkdir(path.c_str(), 0755) == 0 || errno == EEXIST;
  } else {
    const int fd = open(path.c_str(), O_RDONLY | O_CREAT | O_CLOEXEC, 0644);
    made = fd >= 0;
    if (fd >= 0) close(fd);
  }
  if (!made) *error = Failed(absl::StrCat("cannot make a place for ", path, " inside"));
  return made;
}

bool Bind(const Source& source, std::string* error) {
  const std::string what =
      absl::StrCat("cannot bind ", source.path, source.writable ? " read-write" : " read-only");
  if (!MakeMountPoint(source.path, source.directory, error)) return false;
  const std::string from = absl::StrCat("/proc/self/fd/", source.fd);
  if (mount(from.c_str(), source.path.c_str(), nullptr, MS_BIND | MS_REC, nullptr) != 0 ||
      (!source.writable && !SetReadOnly(source.path, true))) {
    *error = Failed(what);
    return false;
  }
  return true;
}

bool MountTmpfs(const std::string& path, const char* options, uint64_t flags, std::string* error) {
  if (mkdir(path.c_str(), 0755) != 0 && errno != EEXIST) {
    *error = Failed(absl::StrCat("cannot make ", path));
    return false;
  }
  if (mount("tmpfs", path.c_str(), "tmpfs", flags | MS_NOSUID | MS_NODEV, options) != 0) {
    *error = Failed(absl::StrCat("cannot mount a tmpfs on ", path));
    return false;
  }
  return true;
}

// /dev: the host's (the GPUs' device nodes must work), but /dev/shm and /dev/mqueue the
// sandbox's own, so that no shared memory of the host or of another job is reachable.
bool MountDev(const Source& dev, std::string* error) {
  if (!Bind(dev, error)) return false;
  struct stat st;
  if (stat("/dev/shm", &st) == 0 && !MountTmpfs("/dev/shm", "mode=1777", 0, error)) return false;
  if (stat("/dev/mqueue", &st) == 0) {
    mount("mqueue", "/dev/mqueue", "mqueue", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr);
  }
  return true;
}

bool Hide(const std::string& path, std::string* error) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return true;  // nothing there to hide
  bool hidden = false;
  if (S_ISDIR(st.st_mode)) {
    hidden = mount("tmpfs", path.c_str(), "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
                   "mode=0755,size=4k") == 0;
  } else {
    hidden = mount("/dev/null", path.c_str(), nullptr, MS_BIND, nullptr) == 0 &&
             SetReadOnly(path, false);
  }
  if (!hidden) *error = Failed(absl::StrCat("cannot hide ", path));
  return hidden;
}

// Builds the new root; the calling process is chrooted into it while it does, so that a
// path (and a symlink's absolute target) resolves as it will inside.
bool Populate(const MountPlan& plan, const Sources& sources, std::string* error) {
  if (mkdir("/proc", 0555) != 0 ||
      mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr) != 0) {
    *error = Failed("cannot mount /proc");
    return false;
  }
  for (const Source& tree : sources.system) {
    if (tree.link.empty()) {
      if (!Bind(tree, error)) return false;
    } else if (symlink(tree.link.c_str(), tree.path.c_str()) != 0) {
      *error = Failed(absl::StrCat("cannot link ", tree.path, " to ", tree.link));
      return false;
    }
  }
  if (!MountDev(sources.dev, error) || !Bind(sources.sys, error) ||
      !MountTmpfs("/tmp", "mode=1777", 0, error)) {
    return false;
  }
  for (const Source& bind : sources.binds) {
    if (!Bind(bind, error)) return false;
  }
  for (const std::string& path : plan.hidden) {
    if (!Hide(path, error)) return false;
  }
  if (!SetReadOnly("/", false)) {
    *error = Failed("cannot make the sandbox's root read-only");
    return false;
  }
  return true;
}

// Out of the chroot, then the staging tmpfs becomes the root and the host's is detached.
bool PivotInto(int old_root, std::string* error) {
  if (fchdir(old_root) != 0 || chroot(".") != 0 || chdir(kStaging) != 0) {
    *error = Failed("cannot leave the staging root");
    return false;
  }
  if (syscall(SYS_pivot_root, ".", ".") != 0) {
    *error = Failed("cannot pivot_root into the sandbox's root");
    return false;
  }
  if (umount2(".", MNT_DETACH) != 0 || chdir("/") != 0) {
    *error = Failed("cannot detach the host's root");
    return false;
  }
  return true;
}

}  // namespace

bool EnterSandboxRoot(const MountPlan& plan, std::string* error) {
  if (unshare(CLONE_NEWNS) != 0) {
    *error = Failed("cannot make a mount namespace");
    return false;
  }
  // Nothing mounted from here on reaches the host's namespace, nor the host's ours.
  if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
    *error = Failed("cannot make the mounts private");
    return false;
  }
  Sources sources;
  if (!OpenHostSources(plan, &sources, error)) return false;
  sources.old_root = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (sources.old_root < 0 ||
      mount("stoke-root", kStaging, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=4m") != 0) {
    *error = Failed("cannot mount the sandbox's root");
    return false;
  }
  if (chdir(kStaging) != 0 || chroot(".") != 0) {
    *error = Failed("cannot enter the sandbox's root");
    return false;
  }
  return Populate(plan, sources, error) && PivotInto(sources.old_root, error);
}

}  // namespace stoke::sandbox
