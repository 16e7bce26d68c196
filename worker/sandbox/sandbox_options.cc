#include "worker/sandbox/sandbox_options.h"

#include <unistd.h>

#include <cctype>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "worker/common/byte_units.h"

namespace stoke::sandbox {
namespace {

bool ParseCount(const std::string& text, uint64_t max, uint64_t* out) {
  if (text.empty() || text.size() > 20) return false;
  uint64_t value = 0;
  for (char c : text) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
    const uint64_t digit = static_cast<uint64_t>(c - '0');
    if (value > (max - digit) / 10) return false;
    value = value * 10 + digit;
  }
  *out = value;
  return true;
}

// Absolute, without "." or ".." components (a bind's place inside must be unambiguous),
// with repeated and trailing slashes dropped.
bool NormalizePath(const std::string& flag, const std::string& text, std::string* out,
                   std::string* error) {
  if (text.empty() || text[0] != '/') {
    *error = absl::StrCat(flag, ": needs an absolute path, not \"", text, "\"");
    return false;
  }
  std::string path;
  for (absl::string_view part : absl::StrSplit(text, '/', absl::SkipEmpty())) {
    if (part == "." || part == "..") {
      *error = absl::StrCat(flag, ": the path may not hold . or ..: ", text);
      return false;
    }
    absl::StrAppend(&path, "/", part);
  }
  *out = path.empty() ? "/" : path;
  return true;
}

// A cgroup's name is one directory: no slash, not "." or "..".
bool CheckGroupName(const std::string& flag, const std::string& name, std::string* error) {
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos) {
    *error = absl::StrCat(flag, ": not a cgroup name (one path component): \"", name, "\"");
    return false;
  }
  return true;
}

bool AddPath(const std::string& flag, const std::string& value, std::vector<std::string>* paths,
             std::string* error) {
  std::string path;
  if (!NormalizePath(flag, value, &path, error)) return false;
  paths->push_back(path);
  return true;
}

bool ApplyNumber(const std::string& flag, const std::string& value, SandboxOptions* options,
                 std::string* error) {
  uint64_t number = 0;
  if (flag == "--memory") {
    if (worker::ParseByteCount(value, &options->memory_bytes)) return true;
    *error = absl::StrCat("--memory: not a byte count (like 67108864 or 64M): ", value);
  } else if (flag == "--pids") {
    if (ParseCount(value, 1u << 22, &options->pids)) return true;
    *error = absl::StrCat("--pids: not a process count: ", value);
  } else if (flag == "--cpu-weight") {
    if (ParseCount(value, 10000, &number) && number >= 1) {
      options->cpu_weight = static_cast<uint32_t>(number);
      return true;
    }
    *error = absl::StrCat("--cpu-weight: not a weight from 1 to 10000: ", value);
  } else {
    const bool ok = ParseCount(value, std::numeric_limits<uint32_t>::max() - 1, &number);
    if (ok && flag == "--uid") options->uid = static_cast<uid_t>(number);
    if (ok && flag == "--gid") options->gid = static_cast<gid_t>(number);
    if (ok) return true;
    *error = absl::StrCat(flag, ": not a numeric id: ", value);
  }
  return false;
}

bool ApplyFlag(const std::string& flag, const std::string& value, SandboxOptions* options,
               std::string* error) {
  if (flag == "--ro") return AddPath(flag, value, &options->read_only, error);
  if (flag == "--rw") return AddPath(flag, value, &options->read_write, error);
  if (flag == "--hide") return AddPath(flag, value, &options->hidden, error);
  if (flag == "--workdir") return NormalizePath(flag, value, &options->workdir, error);
  if (flag == "--cgroup") {
    options->cgroup = value;
    return CheckGroupName(flag, value, error);
  }
  if (flag == "--cgroup-parent") {
    options->cgroup_parent = value;
    return CheckGroupName(flag, value, error);
  }
  if (flag == "--memory" || flag == "--pids" || flag == "--cpu-weight" || flag == "--uid" ||
      flag == "--gid") {
    return ApplyNumber(flag, value, options, error);
  }
  *error = absl::StrCat("unknown flag ", flag, " (see --help)");
  return false;
}

// What the flags mean together, once all are read.
bool CheckTogether(const SandboxOptions& options, std::string* error) {
  if (options.program.empty()) {
    *error = "no PROGRAM to run (stoke-sandbox [options] -- PROGRAM [ARGS...])";
    return false;
  }
  const bool limited = options.memory_bytes > 0 || options.pids > 0 || options.cpu_weight > 0;
  if (limited && options.cgroup.empty()) {
    *error = "--memory, --pids and --cpu-weight need --cgroup NAME (the attempt's cgroup)";
    return false;
  }
  if (options.uid.has_value() != options.gid.has_value()) {
    *error = options.uid ? "--uid needs --gid as well" : "--gid needs --uid as well";
    return false;
  }
  return true;
}

}  // namespace

bool ParseSandboxOptions(int argc, char** argv, SandboxOptions* options, std::string* error) {
  int i = 1;
  for (; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--") {
      ++i;
      break;
    }
    if (arg == "--help" || arg == "-h") {
      options->help = true;
      return true;
    }
    if (arg == "--no-namespaces") {
      options->namespaces = false;
      continue;
    }
    if (arg.rfind("--", 0) != 0) break;  // PROGRAM, without a "--" before it
    const size_t equals = arg.find('=');
    const std::string flag = arg.substr(0, equals);
    std::string value;
    if (equals != std::string::npos) {
      value = arg.substr(equals + 1);
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      *error = absl::StrCat(flag, " needs a value");
      return false;
    }
    if (!ApplyFlag(flag, value, options, error)) return false;
  }
  options->program.assign(argv + i, argv + argc);
  return CheckTogether(*options, error);
}

bool CheckSandboxOptions(const SandboxOptions& options, bool as_root, std::string* error) {
  if (as_root && !options.uid) {
    *error = "running as root: --uid and --gid are required (a user's code never runs as root)";
    return false;
  }
  if (!as_root && options.uid && (*options.uid != geteuid() || *options.gid != getegid())) {
    *error = "--uid and --gid: only root may run a program as another user";
    return false;
  }
  if ((options.uid && *options.uid == 0) || (options.gid && *options.gid == 0)) {
    *error = "--uid and --gid may not be 0 (root)";
    return false;
  }
  return true;
}

std::string SandboxUsage() {
  return R"(Usage: stoke-sandbox [options] -- PROGRAM [ARGS...]
Runs PROGRAM contained: its own root file system (the system's folders read-only, the
binds below), its own pid, mount, IPC and UTS namespaces (the network is the host's), an
unprivileged user, and a cgroup with limits. Nothing it starts outlives it.

  --uid N --gid N        run as this user and group, without supplementary groups
                         (required as root; 0 is refused)
  --ro PATH              bind PATH read-only at the same path inside (repeatable)
  --rw PATH              bind PATH read-write at the same path inside (repeatable)
  --hide PATH            make PATH empty inside, even under a bound tree (repeatable)
  --workdir DIR          start PROGRAM in DIR (default: the current directory, or /)
  --memory BYTES         memory limit (67108864, 64M, 2G; 0 = none)
  --pids N               limit on processes and threads (0 = none)
  --cpu-weight N         CPU weight, 1..10000 (100 is the default share)
  --cgroup NAME          the attempt's cgroup (required with a limit)
  --cgroup-parent NAME   the group that holds it (default "stoke")
  --no-namespaces        no namespaces: contain only the process tree (and the cgroup)
  --help                 this text

Exit status: PROGRAM's (128 + N when signal N ended it); 126 the sandbox could not be
set up; 127 PROGRAM could not be run; 251 it went over its memory limit.
)";
}

}  // namespace stoke::sandbox
