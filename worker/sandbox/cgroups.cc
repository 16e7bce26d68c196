#include "worker/sandbox/cgroups.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace stoke::sandbox {
namespace {

// The controllers the attempt's limits use.
constexpr const char* kControllers[] = {"memory", "pids", "cpu"};

std::string Failed(const std::string& what) { return absl::StrCat(what, ": ", strerror(errno)); }

bool ReadText(const std::string& path, std::string* text) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  text->clear();
  char buffer[4096];
  ssize_t n;
  while ((n = read(fd, buffer, sizeof buffer)) > 0) text->append(buffer, static_cast<size_t>(n));
  close(fd);
  return n == 0;
}

bool WriteText(const std::string& path, const std::string& text) {
  const int fd = open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool written = write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  const int saved = errno;
  close(fd);
  errno = saved;
  return written;
}

bool Exists(const std::string& path) { return access(path.c_str(), F_OK) == 0; }

// The number after `key` in a "key value" file (memory.events, memory.oom_control);
// -1 when the key is not there.
int64_t ReadKey(const std::string& path, const std::string& key) {
  std::string text;
  if (!ReadText(path, &text)) return -1;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    std::vector<absl::string_view> words = absl::StrSplit(line, ' ', absl::SkipEmpty());
    int64_t value = 0;
    if (words.size() == 2 && words[0] == key && absl::SimpleAtoi(words[1], &value)) return value;
  }
  return -1;
}

// The number a one-number file holds (memory.failcnt); -1 when unreadable.
int64_t ReadNumber(const std::string& path) {
  std::string text;
  int64_t value = -1;
  if (!ReadText(path, &text) || !absl::SimpleAtoi(absl::StripAsciiWhitespace(text), &value)) {
    return -1;
  }
  return value;
}

// mountinfo escapes spaces and the like in paths as \040.
std::string Unescape(absl::string_view text) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\\' && i + 3 < text.size()) {
      const std::string octal(text.substr(i + 1, 3));
      out.push_back(static_cast<char>(std::strtol(octal.c_str(), nullptr, 8)));
      i += 3;
    } else {
      out.push_back(text[i]);
    }
  }
  return out;
}

struct Hierarchy {
  std::string mount_point;
  bool v2 = false;
  std::vector<std::string> controllers;
  bool Has(const std::string& controller) const {
    return std::find(controllers.begin(), controllers.end(), controller) != controllers.end();
  }
};

// Every cgroup hierarchy mounted here, from /proc/self/mountinfo: a line's mount point is
// its fifth field; after " - " come the file system type, the source and the options,
// which on v1 name the hierarchy's controllers.
std::vector<Hierarchy> MountedHierarchies() {
  std::string text;
  std::vector<Hierarchy> found;
  if (!ReadText("/proc/self/mountinfo", &text)) return found;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    std::vector<absl::string_view> halves = absl::StrSplit(line, " - ");
    if (halves.size() != 2) continue;
    std::vector<absl::string_view> fields = absl::StrSplit(halves[0], ' ');
    std::vector<absl::string_view> tail = absl::StrSplit(halves[1], ' ');
    if (fields.size() < 5 || tail.size() < 3) continue;
    Hierarchy hierarchy{Unescape(fields[4]), tail[0] == "cgroup2", {}};
    if (tail[0] == "cgroup2") {
      std::string controllers;
      ReadText(hierarchy.mount_point + "/cgroup.controllers", &controllers);
      hierarchy.controllers =
          absl::StrSplit(controllers, absl::ByAnyChar(" \n"), absl::SkipEmpty());
    } else if (tail[0] == "cgroup") {
      hierarchy.controllers = absl::StrSplit(tail[2], ',', absl::SkipEmpty());
    } else {
      continue;
    }
    found.push_back(hierarchy);
  }
  return found;
}

// Each controller from the unified hierarchy when it has it, else from its v1 hierarchy;
// with none of them anywhere, the unified hierarchy alone still lists the processes.
std::vector<Hierarchy> ChooseHierarchies(const std::vector<Hierarchy>& mounted) {
  std::vector<Hierarchy> chosen;
  const Hierarchy* unified = nullptr;
  for (const Hierarchy& h : mounted) {
    if (h.v2 && unified == nullptr) unified = &h;
  }
  for (const char* controller : kControllers) {
    const Hierarchy* from = unified && unified->Has(controller) ? unified : nullptr;
    for (const Hierarchy& h : mounted) {
      if (from == nullptr && !h.v2 && h.Has(controller)) from = &h;
    }
    if (from == nullptr) continue;
    auto same = [&](const Hierarchy& h) { return h.mount_point == from->mount_point; };
    auto at = std::find_if(chosen.begin(), chosen.end(), same);
    if (at == chosen.end()) {
      at = chosen.insert(chosen.end(), Hierarchy{from->mount_point, from->v2, {}});
    }
    at->controllers.push_back(controller);
  }
  if (chosen.empty() && unified != nullptr) chosen.push_back({unified->mount_point, true, {}});
  return chosen;
}

// v2: a group's children get a controller only when the group enables it. One write per
// controller, so that one refused (cpu, with a realtime thread about) keeps the others.
void EnableControllers(const std::string& dir, const std::vector<std::string>& controllers) {
  for (const std::string& controller : controllers) {
    WriteText(dir + "/cgroup.subtree_control", "+" + controller);
  }
}

bool MakeDirectory(const std::string& path) {
  return mkdir(path.c_str(), 0755) == 0 || errno == EEXIST;
}

std::vector<pid_t> ListProcesses(const std::string& dir) {
  std::string text;
  std::vector<pid_t> pids;
  if (!ReadText(dir + "/cgroup.procs", &text)) return pids;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    int pid = 0;
    if (absl::SimpleAtoi(line, &pid) && pid > 0) pids.push_back(pid);
  }
  return pids;
}

}  // namespace

bool AttemptCgroup::Create(const std::string& parent, const std::string& name,
                           const CgroupLimits& limits, std::vector<std::string>* notes,
                           std::string* error) {
  limits_ = limits;
  std::string refused;
  for (const Hierarchy& h : ChooseHierarchies(MountedHierarchies())) {
    const std::string parent_dir = absl::StrCat(h.mount_point, "/", parent);
    if (h.v2) EnableControllers(h.mount_point, h.controllers);
    if (!MakeDirectory(parent_dir)) {
      refused = Failed(absl::StrCat("cannot make ", parent_dir));
      continue;
    }
    if (h.v2) EnableControllers(parent_dir, h.controllers);
    Group group{absl::StrCat(parent_dir, "/", name), h.v2, h.controllers};
    if (!MakeDirectory(group.dir)) {
      refused = Failed(absl::StrCat("cannot make ", group.dir));
      continue;
    }
    groups_.push_back(group);
  }
  if (groups_.empty()) {
    notes->push_back(absl::StrCat("no writable cgroup hierarchy here (",
                                  refused.empty() ? "none mounted" : refused,
                                  "): going on without limits"));
    return true;
  }
  return WriteMemoryLimit(notes, error) && WriteCountLimits(notes, error);
}

const AttemptCgroup::Group* AttemptCgroup::WithController(const std::string& controller) const {
  for (const Group& group : groups_) {
    if (std::find(group.controllers.begin(), group.controllers.end(), controller) !=
        group.controllers.end()) {
      return &group;
    }
  }
  return nullptr;
}

bool AttemptCgroup::WriteMemoryLimit(std::vector<std::string>* notes, std::string* error) const {
  if (limits_.memory_bytes == 0) return true;
  const Group* group = WithController("memory");
  const std::string limit_file = group == nullptr ? ""
                                 : group->v2      ? group->dir + "/memory.max"
                                                  : group->dir + "/memory.limit_in_bytes";
  if (group == nullptr || !Exists(limit_file)) {
    notes->push_back("no memory controller here: the memory limit is not enforced");
    return true;
  }
  const std::string bytes = std::to_string(limits_.memory_bytes);
  // v1: memory+swap may not go below memory, so it is written on both sides of it (a
  // reused group may hold either a lower or a higher limit).
  const std::string memsw = group->dir + "/memory.memsw.limit_in_bytes";
  if (!group->v2 && Exists(memsw)) WriteText(memsw, bytes);
  if (!WriteText(limit_file, bytes)) {
    *error = Failed(absl::StrCat("cannot write ", bytes, " to ", limit_file));
    return false;
  }
  if (!group->v2 && Exists(memsw)) WriteText(memsw, bytes);
  if (group->v2) {
    WriteText(group->dir + "/memory.swap.max", "0");   // absent without swap accounting
    WriteText(group->dir + "/memory.oom.group", "1");  // Linux 4.19
  }
  return true;
}

bool AttemptCgroup::WriteCountLimits(std::vector<std::string>* notes, std::string* error) const {
  struct Limit {
    const char* controller;
    uint64_t v2_value, v1_value;
    const char* v2_file;
    const char* v1_file;
  };
  // v1's cpu.shares: 1024 is the default share, as weight 100 is v2's.
  const uint64_t shares = std::max<uint64_t>(2, uint64_t{limits_.cpu_weight} * 1024 / 100);
  const Limit wanted[] = {{"pids", limits_.pids, limits_.pids, "pids.max", "pids.max"},
                          {"cpu", limits_.cpu_weight, shares, "cpu.weight", "cpu.shares"}};
  for (const Limit& limit : wanted) {
    if (limit.v2_value == 0) continue;
    const Group* group = WithController(limit.controller);
    const std::string file =
        group == nullptr ? ""
                         : absl::StrCat(group->dir, "/", group->v2 ? limit.v2_file : limit.v1_file);
    if (group == nullptr || !Exists(file)) {
      notes->push_back(
          absl::StrCat("no ", limit.controller, " controller here: the limit is not enforced"));
      continue;
    }
    const uint64_t value = group->v2 ? limit.v2_value : limit.v1_value;
    if (!WriteText(file, std::to_string(value))) {
      *error = Failed(absl::StrCat("cannot write ", value, " to ", file));
      return false;
    }
  }
  return true;
}

bool AttemptCgroup::Join(std::string* error) const {
  for (const Group& group : groups_) {
    // "0" is the writer itself, whichever pid namespace it is in.
    if (!WriteText(group.dir + "/cgroup.procs", "0")) {
      *error = Failed(absl::StrCat("cannot join the cgroup ", group.dir));
      return false;
    }
  }
  return true;
}

bool AttemptCgroup::KillAllAndWaitEmpty(std::chrono::milliseconds bound) const {
  const auto deadline = std::chrono::steady_clock::now() + bound;
  for (;;) {
    bool empty = true;
    for (const Group& group : groups_) {
      const std::vector<pid_t> pids = ListProcesses(group.dir);
      if (pids.empty()) continue;
      empty = false;
      // v2 (Linux 5.14) kills the whole group at once, forks in flight included.
      if (group.v2) WriteText(group.dir + "/cgroup.kill", "1");
      for (pid_t pid : pids) kill(pid, SIGKILL);
    }
    if (empty) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

bool AttemptCgroup::OutOfMemory(int exit_code) const {
  const Group* group = WithController("memory");
  if (group == nullptr || limits_.memory_bytes == 0) return false;
  if (group->v2) return ReadKey(group->dir + "/memory.events", "oom_kill") > 0;
  const int64_t kills = ReadKey(group->dir + "/memory.oom_control", "oom_kill");
  if (kills >= 0) return kills > 0;
  // Before Linux 4.13: the limit was hit, and the attempt ended by SIGKILL.
  return ReadNumber(group->dir + "/memory.failcnt") > 0 && exit_code == 128 + SIGKILL;
}

bool AttemptCgroup::Remove(std::string* error) const {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  for (const Group& group : groups_) {
    // A group empties a moment after its last process is reaped: EBUSY until then.
    while (rmdir(group.dir.c_str()) != 0 && errno != ENOENT) {
      if (errno != EBUSY || std::chrono::steady_clock::now() >= deadline) {
        *error = Failed(absl::StrCat("cannot remove the cgroup ", group.dir));
        return false;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  return true;
}

}  // namespace stoke::sandbox
