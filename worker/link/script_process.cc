#include "worker/link/script_process.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "files/posix_files.h"
#include "proto/stoke/v1/limits.h"
#include "spec/code_bundle.h"
#include "spec/job_defaults.h"
#include "worker/link/attempt_folder.h"
#include "worker/sandbox/sandbox_exit.h"

namespace stoke::worker {
namespace {

using Clock = std::chrono::steady_clock;

TrainOutcome Failed(std::string message, bool retryable = true) {
  return {TrainOutcome::Kind::kFailed, std::move(message), retryable};
}

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// A name stoke.report may use for a scalar of its own: a Python identifier, as keyword
// arguments are, and short enough for a label.
bool IsScalarName(absl::string_view name) {
  if (name.empty() || name.size() > v1::kMaxScalarNameBytes ||
      std::isdigit(static_cast<unsigned char>(name[0]))) {
    return false;
  }
  for (char c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
  }
  return true;
}

// The value of `name` in `env` (NAME=VALUE entries), "" when absent.
std::string ValueIn(const std::vector<std::string>& env, const std::string& name) {
  for (const std::string& entry : env) {
    if (absl::StartsWith(entry, name + "=")) return entry.substr(name.size() + 1);
  }
  return "";
}

// `program` as execve needs it: a name without '/' looked up on `path`, a relative path
// taken from `workdir`. NOT_FOUND when there is no such executable.
absl::StatusOr<std::string> ResolveProgram(const std::string& program, const std::string& path,
                                           const std::string& workdir) {
  if (program.find('/') != std::string::npos) {
    const std::string full = program[0] == '/' ? program : absl::StrCat(workdir, "/", program);
    if (access(full.c_str(), X_OK) == 0 && !files::IsDirectory(full)) return full;
    return absl::NotFoundError(absl::StrCat(
        program, ": ", access(full.c_str(), F_OK) == 0 ? "not executable" : "no such file",
        program[0] == '/' ? "" : " in the working folder"));
  }
  for (const absl::string_view dir : absl::StrSplit(path, ':', absl::SkipEmpty())) {
    const std::string full = absl::StrCat(dir, "/", program);
    if (access(full.c_str(), X_OK) == 0 && !files::IsDirectory(full)) return full;
  }
  return absl::NotFoundError(
      absl::StrCat(program, ": not found on the worker's PATH (", path, ")"));
}

// The folder the program runs in: the sent working folder, one beneath a data root, or the
// rank's own folder.
absl::StatusOr<std::string> WorkingFolder(const v1::Assignment& a, const std::string& rank_folder) {
  const v1::CommandSpec& command = a.spec().command();
  if (!command.code_sha256().empty()) {
    const std::string name = spec::WorkdirName(a.code());
    if (a.code().files_size() == 0 || name.empty()) {
      return absl::FailedPreconditionError(
          absl::StrCat("command.workdir: the assignment came without the job's folder (sha256 ",
                       command.code_sha256(), "); the coordinator's store has none under it"));
    }
    return absl::StrCat(rank_folder, "/code/", name);
  }
  if (command.workdir().empty()) return rank_folder;
  // Checked at submission; again here, where a link may have been swapped in since.
  char resolved[PATH_MAX];
  if (realpath(command.workdir().c_str(), resolved) == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("command.workdir: ", command.workdir(), ": ", std::strerror(errno)));
  }
  const std::string canonical = resolved;
  for (const std::string& root : a.data_roots()) {
    if (canonical == root || absl::StartsWith(canonical, root == "/" ? root : root + "/")) {
      return canonical;
    }
  }
  return absl::FailedPreconditionError(absl::StrCat("command.workdir: ", command.workdir(),
                                                    " is outside the coordinator's data roots"));
}

// The environment a script's interpreter lives in (command.python: a virtual environment
// on the workers), for its sandbox to show: none when it is the system's.
std::vector<std::string> InterpreterFolder(const std::vector<std::string>& argv) {
  if (argv.empty() || argv[0].empty() || argv[0][0] != '/') return {};
  for (const char* system : {"/usr/", "/bin/", "/sbin/", "/lib", "/opt/", "/etc/"}) {
    if (absl::StartsWith(argv[0], system)) return {};
  }
  // <env>/bin/python: the environment is two folders up.
  const std::string bin = argv[0].substr(0, argv[0].rfind('/'));
  return {bin.substr(0, std::max<size_t>(1, bin.rfind('/')))};
}

// MASTER_ADDR and MASTER_PORT: the gang's rendezvous (rank 0's host and a port the
// coordinator reserved), or for a job of one rank a free port of this host.
std::pair<std::string, std::string> MasterAddress(const std::string& rendezvous) {
  const size_t colon = rendezvous.rfind(':');
  if (!rendezvous.empty() && colon != std::string::npos) {
    std::string host = rendezvous.substr(0, colon);
    if (host.size() > 1 && host.front() == '[' && host.back() == ']') {
      host = host.substr(1, host.size() - 2);
    }
    return {host, rendezvous.substr(colon + 1)};
  }
  int port = 29500;  // torchrun's default, when no free one can be learned
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t size = sizeof address;
  if (fd >= 0 && bind(fd, reinterpret_cast<sockaddr*>(&address), size) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&address), &size) == 0) {
    port = ntohs(address.sin_port);
  }
  if (fd >= 0) close(fd);
  return {"127.0.0.1", std::to_string(port)};
}

// The program and its environment, as the rank runs them.
struct Launch {
  std::vector<std::string> argv;
  std::vector<std::string> env;
};

absl::StatusOr<Launch> PrepareLaunch(const ScriptOptions& options, const v1::Assignment& a,
                                     const std::string& workdir,
                                     const std::string& checkpoint_dir) {
  const v1::CommandSpec& command = a.spec().command();
  const auto [master_addr, master_port] = MasterAddress(a.rendezvous_address());
  std::vector<std::string> extra = {
      "PYTHONUNBUFFERED=1",  // print() reaches the log as it happens
      absl::StrCat("RANK=", a.rank()),
      absl::StrCat("GROUP_RANK=", a.rank()),
      "LOCAL_RANK=0",  // each rank sees its own device alone, as device 0
      absl::StrCat("WORLD_SIZE=", std::max(1u, a.world_size())),
      "LOCAL_WORLD_SIZE=1",
      "MASTER_ADDR=" + master_addr,
      "MASTER_PORT=" + master_port,
      "CUDA_VISIBLE_DEVICES=" + options.visible_devices,
      "STOKE_JOB_ID=" + a.job_id(),
      absl::StrCat("STOKE_ATTEMPT=", a.attempt()),
      "STOKE_CHECKPOINT_DIR=" + checkpoint_dir,
      "STOKE_REPORT_FD=3"};
  // PATH and PYTHONPATH: the user's own if command.env sets them, else the worker's;
  // a virtual environment's programs first on PATH, the SDK last on PYTHONPATH.
  const std::vector<std::string> inherited = ChildEnvironment(options.job_user);
  std::string path = ValueIn(inherited, "PATH");
  std::string python_path = ValueIn(inherited, "PYTHONPATH");
  for (const std::string& entry : command.env()) {
    if (absl::StartsWith(entry, "PATH=")) {
      path = entry.substr(5);
    } else if (absl::StartsWith(entry, "PYTHONPATH=")) {
      python_path = entry.substr(11);
    } else {
      extra.push_back(entry);
    }
  }
  if (path.empty()) path = "/usr/local/bin:/usr/bin:/bin";
  std::string python = command.python().empty() ? options.default_python : command.python();
  if (!command.python().empty() && files::IsDirectory(command.python())) {
    path = absl::StrCat(command.python(), "/bin:", path);
    extra.push_back("VIRTUAL_ENV=" + command.python());
    python = command.python() + "/bin/python";
  }
  if (!options.sdk_path.empty()) {
    python_path = absl::StrCat(python_path, python_path.empty() ? "" : ":", options.sdk_path);
  }
  extra.push_back("PATH=" + path);
  if (!python_path.empty()) extra.push_back("PYTHONPATH=" + python_path);

  Launch launch;
  launch.argv.assign(command.argv().begin(), command.argv().end());
  if (launch.argv[0] == "python" || launch.argv[0] == "python3") launch.argv[0] = python;
  auto program = ResolveProgram(launch.argv[0], path, workdir);
  if (!program.ok()) {
    return absl::NotFoundError(absl::StrCat("command.argv[0]: ", program.status().message()));
  }
  launch.argv[0] = *program;
  launch.env = ChildEnvironment(options.job_user, extra);
  return launch;
}

// Reads one descriptor's lines as they come.
class LineReader {
 public:
  // Appends what is there; false at the end (or an error) of the descriptor.
  template <typename Take>
  bool Read(int fd, Take take) {
    char buffer[1 << 16];
    const ssize_t n = read(fd, buffer, sizeof buffer);
    if (n > 0) splitter_.Append(buffer, static_cast<size_t>(n), take);
    return n > 0 || (n < 0 && (errno == EINTR || errno == EAGAIN));
  }
  template <typename Take>
  void Flush(Take take) {
    splitter_.Flush(take);
  }
  std::string Last() const { return splitter_.Last(); }

 private:
  LineSplitter splitter_;
};

// How the program ended, as the loop saw it.
struct ScriptEnd {
  int status = 0;  // waitpid's
  bool stop_sent = false;
  bool terminated = false;  // SIGTERM sent
  bool killed = false;      // SIGKILL sent
  std::string last_lines;
};

TrainOutcome OutcomeOf(const ScriptEnd& end, uint32_t grace_seconds) {
  const bool exited = WIFEXITED(end.status);
  const int code = exited ? WEXITSTATUS(end.status) : -1;
  if (end.stop_sent) {
    const std::string how =
        end.killed       ? absl::StrCat("was killed after its grace of ", grace_seconds, " s")
        : end.terminated ? "stopped on SIGTERM"
                         : absl::StrCat("stopped by itself (status ", code, ")");
    return {TrainOutcome::Kind::kCancelled, "cancelled: the program " + how, true};
  }
  std::string message;
  if (exited && code == 0) {
    return {TrainOutcome::Kind::kSucceeded, "the program exited with status 0", true};
  }
  if (exited && code == 126) {
    message = "cannot set up the program (its working folder, descriptors or --job-user)";
  } else if (exited && code == sandbox::kSandboxOutOfMemory) {
    message = "the program went over the job's memory limit (stoke-worker --job-memory)";
  } else if (exited) {
    message = absl::StrCat("the program exited with status ", code);
  } else {
    message = absl::StrCat("the program died: ", SignalName(WTERMSIG(end.status)));
  }
  if (!end.last_lines.empty()) absl::StrAppend(&message, ": ", end.last_lines);
  return Failed(message);
}

}  // namespace

ReportWindow::ReportWindow(int world_size, Clock::time_point started)
    : world_size_(std::max(1, world_size)), started_(started), window_began_(started) {}

std::string ReportWindow::Add(const std::string& line) {
  std::string note;
  for (const absl::string_view pair : absl::StrSplit(line, ' ', absl::SkipEmpty())) {
    const size_t equals = pair.find('=');
    const std::string key{pair.substr(0, std::min(equals, pair.size()))};
    const std::string text{equals == absl::string_view::npos ? "" : pair.substr(equals + 1)};
    char* end = nullptr;
    const double value = std::strtod(text.c_str(), &end);
    if (text.empty() || *end != '\0') {
      if (!warned_values_) {
        note = absl::StrCat("stoke.report: ", key, "=", text.substr(0, 32),
                            " is not a number; reported values must be numbers");
      }
      warned_values_ = true;
      continue;
    }
    pending_ = true;
    const auto count = [value] {
      return value > 0 && std::isfinite(value) ? static_cast<uint64_t>(value) : uint64_t{0};
    };
    if (key == "step") {
      latest_.step = count();
    } else if (key == "total_steps") {
      latest_.total_steps = count();
    } else if (key == "epoch") {
      latest_.epoch = static_cast<uint32_t>(std::min<uint64_t>(count(), UINT32_MAX));
    } else if (key == "loss") {
      loss_sum_ += value;
      ++losses_;
    } else if (key == "lr" || key == "learning_rate") {
      latest_.learning_rate = value;
    } else if (key == "samples") {
      samples_ += std::isfinite(value) && value > 0 ? value : 0;
    } else if (key == "samples_per_second") {
      latest_.samples_per_second = value;
    } else if (key == "tokens_per_second") {
      latest_.tokens_per_second = value;
    } else if (key == "memory_allocated_bytes") {
      latest_.memory_allocated_bytes = count();
    } else if (key == "memory_reserved_bytes") {
      latest_.memory_reserved_bytes = count();
    } else if (key == "memory_peak_bytes") {
      latest_.memory_peak_bytes = count();
    } else if (IsScalarName(key) && (latest_.scalars.count(key) > 0 ||
                                     latest_.scalars.size() < v1::kMaxReportedScalars)) {
      latest_.scalars[key] = value;
    } else if (!IsScalarName(key)) {
      if (!warned_bad_name_) {
        note = absl::StrCat("stoke.report: \"", key.substr(0, 80),
                            "\" dropped: names are Python identifiers of at most ",
                            v1::kMaxScalarNameBytes, " characters");
      }
      warned_bad_name_ = true;
    } else {
      if (!warned_too_many_) {
        note = absl::StrCat("stoke.report: ", key, " dropped: a job reports at most ",
                            v1::kMaxReportedScalars, " names of its own");
      }
      warned_too_many_ = true;
    }
  }
  return note;
}

std::optional<MetricSample> ReportWindow::Take(Clock::time_point now) {
  if (!pending_) return std::nullopt;
  MetricSample sample = latest_;
  if (losses_ > 0) sample.loss = loss_sum_ / losses_;
  const double seconds = Seconds(now - window_began_);
  // Each rank reports its own samples; the job trains world_size times as many.
  if (samples_ > 0 && seconds > 0) sample.samples_per_second = samples_ * world_size_ / seconds;
  sample.elapsed_seconds = Seconds(now - started_);
  latest_.loss = sample.loss;
  loss_sum_ = 0;
  losses_ = 0;
  samples_ = 0;
  window_began_ = now;
  pending_ = false;
  return sample;
}

TrainOutcome RunScript(const ScriptOptions& given, const v1::Assignment& a,
                       TrainingObserver& observer, const std::atomic<bool>& cancel) {
  const auto owned = WithOwnersUser(given, a);
  if (!owned.ok()) return Failed(std::string{owned.status().message()});
  const ScriptOptions& options = *owned;
  const v1::CommandSpec& command = a.spec().command();
  if (command.argv_size() == 0) return Failed("command.argv: empty", /*retryable=*/false);
  const uint32_t grace_seconds =
      command.grace_seconds() > 0 ? command.grace_seconds() : defaults::kGraceSeconds;
  const std::chrono::milliseconds grace{grace_seconds * 1000LL};

  auto folders = PrepareAttemptFolder(a, options.scratch_dir, options.job_user);
  if (!folders.ok()) return Failed(std::string{folders.status().message()});
  auto workdir = WorkingFolder(a, folders->rank);
  if (!workdir.ok()) return Failed(std::string{workdir.status().message()}, false);
  auto launch = PrepareLaunch(options, a, *workdir, folders->checkpoints);
  if (!launch.ok()) return Failed(std::string{launch.status().message()}, false);

  Pipe output;
  int sockets[2] = {-1, -1};
  const int null_in = HighDescriptor(open("/dev/null", O_RDONLY | O_CLOEXEC));
  if (!output.Open() || null_in < 0 ||
      socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sockets) != 0) {
    output.CloseBoth();
    if (null_in >= 0) close(null_in);
    return Failed(absl::StrCat("cannot start the program: ", std::strerror(errno)));
  }
  int report = HighDescriptor(sockets[0]);
  int child_end = HighDescriptor(sockets[1]);
  observer.OnLog(absl::StrCat("rank ", a.rank(), " of ", std::max(1u, a.world_size()), ": ",
                              absl::StrJoin(launch->argv, " "), " (in ", *workdir, ")"));
  const Clock::time_point began = Clock::now();
  const bool sandboxed = options.sandbox.enabled();
  const pid_t pid = SpawnChild(
      sandboxed ? SandboxedCommand(options.sandbox, options.job_user, a, folders->base,
                                   InterpreterFolder(launch->argv), *workdir, launch->argv)
                : launch->argv,
      launch->env, {null_in, output.write, output.write, child_end},
      sandboxed ? std::nullopt : options.job_user, sandboxed ? "" : *workdir);
  close(null_in);
  Pipe::Close(output.write);
  Pipe::Close(child_end);
  if (pid < 0) {
    output.CloseBoth();
    Pipe::Close(report);
    return Failed(absl::StrCat("cannot start the program: ", std::strerror(errno)));
  }
  fcntl(report, F_SETFL, O_NONBLOCK);
  observer.OnStarted();

  ReportWindow window(static_cast<int>(a.world_size()), began);
  LineReader out, reports;
  ScriptEnd end;
  bool exited = false, output_open = true, reports_open = true, first_report = true;
  Clock::time_point term_at = Clock::time_point::max(), kill_at = Clock::time_point::max();
  Clock::time_point exited_at, last_sample = began;
  const auto log = [&](const std::string& line) { observer.OnLog(line); };
  const auto take_report = [&](const std::string& line) {
    const Clock::time_point now = Clock::now();
    if (first_report) {
      // The program's own set-up (imports, data, model) is its start-up.
      first_report = false;
      StartupTimes times;
      times.process_seconds = Seconds(now - began);
      times.completed_at = now;
      observer.OnFirstStep(times);
    }
    if (const std::string note = window.Add(line); !note.empty()) observer.OnLog(note);
  };
  const auto send_sample = [&](Clock::time_point now) {
    if (auto sample = window.Take(now)) observer.OnMetrics(*sample);
    last_sample = now;
  };
  for (;;) {
    pollfd fds[2] = {{output_open ? output.read : -1, POLLIN, 0},
                     {reports_open ? report : -1, POLLIN, 0}};
    poll(fds, 2, 100);
    if (fds[0].revents != 0) output_open = out.Read(output.read, log);
    if (fds[1].revents != 0) reports_open = reports.Read(report, take_report);
    const Clock::time_point now = Clock::now();
    if (now - last_sample >= options.report_interval) send_sample(now);
    if (cancel.load(std::memory_order_relaxed) && !end.stop_sent) {
      // should_stop() turns true; the signals follow if the program does not end.
      const ssize_t written = send(report, "stop\n", 5, MSG_NOSIGNAL | MSG_DONTWAIT);
      (void)written;
      end.stop_sent = true;
      term_at = now + grace / 2;
      kill_at = now + grace;
    }
    if (!exited && !end.terminated && now >= term_at) {
      kill(-pid, SIGTERM);
      end.terminated = true;
    }
    if (!exited && !end.killed && now >= kill_at) {
      kill(-pid, SIGKILL);
      end.killed = true;
    }
    if (!exited && waitpid(pid, &end.status, WNOHANG) == pid) {
      exited = true;
      exited_at = now;
    }
    // Once it has exited: what it wrote last is read, but a process it started that
    // still holds its output open is not waited for.
    if (exited && ((!output_open && !reports_open) || now - exited_at > std::chrono::seconds(1))) {
      break;
    }
  }
  out.Flush(log);
  reports.Flush(take_report);
  send_sample(Clock::now());
  kill(-pid, SIGKILL);  // whatever it started and left behind goes with it
  output.CloseBoth();
  Pipe::Close(report);
  if (a.job_dir().empty()) files::RemoveTree(folders->base);
  end.last_lines = out.Last();
  return OutcomeOf(end, grace_seconds);
}

}  // namespace stoke::worker
