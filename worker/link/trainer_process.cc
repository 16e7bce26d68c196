#include "worker/link/trainer_process.h"

#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "files/posix_files.h"
#include "stoke/v1/trainer.pb.h"
#include "worker/link/attempt_folder.h"
#include "worker/link/child_process.h"
#include "worker/link/frames.h"
#include "worker/link/task_translation.h"
#include "worker/sandbox/sandbox_exit.h"

namespace stoke::worker {
namespace {

using Clock = std::chrono::steady_clock;

// One 8-byte page both processes map: the step the trainer has begun, written by it at
// each step's start at the cost of a store, read here when it dies.
class ProgressPage {
 public:
  bool Open() {
    fd_ = static_cast<int>(syscall(SYS_memfd_create, "stoke-trainer-progress", MFD_CLOEXEC));
    if (fd_ < 0) return false;
    fd_ = HighDescriptor(fd_);
    if (fd_ < 0 || ftruncate(fd_, sizeof(uint64_t)) != 0) return false;
    void* page = mmap(nullptr, sizeof(uint64_t), PROT_READ, MAP_SHARED, fd_, 0);
    if (page == MAP_FAILED) return false;
    step_ = static_cast<const std::atomic<uint64_t>*>(page);
    return true;
  }
  ~ProgressPage() {
    if (step_ != nullptr) munmap(const_cast<std::atomic<uint64_t>*>(step_), sizeof(uint64_t));
    if (fd_ >= 0) close(fd_);
  }
  int Descriptor() const { return fd_; }
  uint64_t Step() const { return step_ ? step_->load(std::memory_order_relaxed) : 0; }

 private:
  int fd_ = -1;
  const std::atomic<uint64_t>* step_ = nullptr;
};

std::string AtStep(uint64_t step) {
  return step == 0 ? "while building the model and its data" : absl::StrCat("at step ", step);
}

TrainOutcome Failed(std::string message, bool retryable = true) {
  return {TrainOutcome::Kind::kFailed, std::move(message), retryable};
}

}  // namespace

std::string TrainerBesideThisProgram() { return BesideThisProgram("stoke-trainer"); }

// A started stoke-trainer: its pid and the worker's ends of its pipes, owned until its
// task has run (RunTask) or it is discarded (killed with whatever it started).
struct TrainerChild {
  pid_t pid = -1;
  Pipe commands, output, events;
  ProgressPage progress;
  Clock::time_point started_at;

  ~TrainerChild() {
    if (pid > 0) {
      kill(-pid, SIGKILL);
      int status = 0;
      waitpid(pid, &status, 0);
    }
    commands.CloseBoth();
    output.CloseBoth();
    events.CloseBoth();
  }
};

// Starts a trainer: for `folders`' task in its sandbox when the options have one (the
// sandbox binds the task's folders, so such a trainer cannot start ahead of its task).
absl::StatusOr<std::unique_ptr<TrainerChild>> StartTrainer(
    const TrainerProcessOptions& options, const v1::Assignment* task = nullptr,
    const AttemptFolders* folders = nullptr) {
  if (options.trainer_path.empty()) {
    return absl::FailedPreconditionError(
        "this worker has no stoke-trainer beside it, which trains Python and TorchScript "
        "models; install it with the worker");
  }
  auto child = std::make_unique<TrainerChild>();
  if (!child->commands.Open() || !child->output.Open() || !child->events.Open() ||
      !child->progress.Open()) {
    return absl::InternalError(
        absl::StrCat("cannot start the training process: ", std::strerror(errno)));
  }
  // print() reaches the log as it happens; the code folder gets no __pycache__.
  const std::vector<std::string> env =
      ChildEnvironment(options.job_user, {"PYTHONUNBUFFERED=1", "PYTHONDONTWRITEBYTECODE=1"});
  child->started_at = Clock::now();
  std::vector<std::string> argv = {options.trainer_path, "--device", options.device, "--threads",
                                   std::to_string(options.threads)};
  std::optional<JobUser> user = options.job_user;
  if (options.sandbox.enabled() && task != nullptr && folders != nullptr) {
    // The sandbox becomes the user itself, after building the child's root as root.
    argv = SandboxedCommand(options.sandbox, user, *task, folders->base, {}, folders->rank, argv);
    user.reset();
  }
  const pid_t pid = SpawnChild(argv, env,
                               {child->commands.read, child->output.write, child->output.write,
                                child->events.write, child->progress.Descriptor()},
                               user);
  Pipe::Close(child->commands.read);
  Pipe::Close(child->output.write);
  Pipe::Close(child->events.write);
  if (pid < 0) {
    return absl::InternalError(
        absl::StrCat("cannot start the training process: ", std::strerror(errno)));
  }
  child->pid = pid;
  fcntl(child->commands.write, F_SETFL, O_NONBLOCK);
  return child;
}

// What the trainer reports, from the bytes of its event pipe to the observer's calls.
class EventRelay {
 public:
  EventRelay(TrainingObserver& observer, Clock::time_point task_began)
      : observer_(observer), task_began_(task_began) {}

  void Feed(const char* data, size_t size) {
    decoder_.Append(data, size);
    v1::TrainerEvent event;
    while (decoder_.Next(&event)) Dispatch(event);
  }
  // The outcome the trainer reported of itself, if it did.
  const std::optional<TrainOutcome>& Reported() const { return reported_; }

 private:
  void Dispatch(const v1::TrainerEvent& event) {
    switch (event.kind_case()) {
      case v1::TrainerEvent::kReady: {
        // What the task waited for the trainer: nothing when it was started ahead and
        // ready before the task came.
        const Clock::time_point ready_at(
            std::chrono::nanoseconds(event.ready().ready_at_monotonic_ns()));
        process_seconds_ =
            std::max(0.0, std::chrono::duration<double>(ready_at - task_began_).count());
        break;
      }
      case v1::TrainerEvent::kStarted:
        observer_.OnStarted();
        break;
      case v1::TrainerEvent::kFirstStep: {
        StartupTimes times = FromProto(event.first_step().startup());
        times.process_seconds = process_seconds_;
        times.completed_at = Clock::time_point(
            std::chrono::nanoseconds(event.first_step().completed_at_monotonic_ns()));
        observer_.OnFirstStep(times);
        break;
      }
      case v1::TrainerEvent::kMetrics:
        observer_.OnMetrics(FromProto(event.metrics()));
        break;
      case v1::TrainerEvent::kLog:
        observer_.OnLog(event.log());
        break;
      case v1::TrainerEvent::kFinished: {
        const auto& f = event.finished();
        const TrainOutcome::Kind kind =
            f.outcome() == v1::TASK_OUTCOME_SUCCEEDED   ? TrainOutcome::Kind::kSucceeded
            : f.outcome() == v1::TASK_OUTCOME_CANCELLED ? TrainOutcome::Kind::kCancelled
            : f.outcome() == v1::TASK_OUTCOME_PREEMPTED ? TrainOutcome::Kind::kPreempted
                                                        : TrainOutcome::Kind::kFailed;
        reported_ = TrainOutcome{kind, f.message(), f.retryable()};
        break;
      }
      default:
        break;
    }
  }

  TrainingObserver& observer_;
  const Clock::time_point task_began_;
  FrameDecoder decoder_;
  double process_seconds_ = 0;
  std::optional<TrainOutcome> reported_;
};

// How a trainer's task ended, as RunTask saw it.
struct TrainerEnd {
  int status = 0;  // waitpid's
  std::optional<TrainOutcome> reported;
  bool cancel_sent = false;
  bool preempt_sent = false;
  bool killed = false;  // after the cancel's grace
  uint64_t step = 0;    // the step it had begun
  std::string last_lines;
};

TrainOutcome OutcomeOf(const TrainerEnd& end, const TrainerProcessOptions& options) {
  // What it said of itself stands, even if it then died on its way out.
  if (end.reported) return *end.reported;
  if (end.cancel_sent) {
    return {TrainOutcome::Kind::kCancelled,
            end.killed ? absl::StrCat("cancelled ", AtStep(end.step),
                                      "; the training process did not stop within ",
                                      options.cancel_grace.count() / 1000, " s and was killed")
                       : absl::StrCat("cancelled ", AtStep(end.step))};
  }
  // Built and at its first step, the same crash would come again.
  const bool retryable = end.step > 1;
  if (WIFSIGNALED(end.status)) {
    return Failed(absl::StrCat("the training process died: ", SignalName(WTERMSIG(end.status)), " ",
                               AtStep(end.step)),
                  retryable);
  }
  const int code = WIFEXITED(end.status) ? WEXITSTATUS(end.status) : -1;
  std::string message =
      absl::StrCat("the training process exited with status ", code, " ", AtStep(end.step));
  if (code == 127)
    message = absl::StrCat("cannot run ", options.trainer_path, " (exit status 127)");
  if (code == 126) message = "cannot set up the training process (its descriptors or --job-user)";
  if (code == sandbox::kSandboxOutOfMemory) {
    message = absl::StrCat("the training process went over the job's memory limit (stoke-worker ",
                           "--job-memory) ", AtStep(end.step));
  }
  if (!end.last_lines.empty()) absl::StrAppend(&message, ": ", end.last_lines);
  return Failed(message, retryable);
}

// What ends a task before a trainer runs it: the assignment came without its model's code,
// or its folders cannot be made. Otherwise `folders` holds them, made before the trainer
// starts (a sandboxed one binds them).
std::optional<TrainOutcome> PrepareTask(const TrainerProcessOptions& options,
                                        const v1::Assignment& assignment, AttemptFolders* folders) {
  if (assignment.spec().model().has_python() && assignment.code().files_size() == 0) {
    return Failed(
        absl::StrCat("model.python: the assignment came without the model's code (sha256 ",
                     assignment.spec().model().python().code_sha256(),
                     "); the coordinator's store has none under it"),
        /*retryable=*/false);
  }
  auto made = PrepareAttemptFolder(assignment, options.scratch_dir, options.job_user);
  if (!made.ok()) return Failed(std::string{made.status().message()});
  *folders = *std::move(made);
  return std::nullopt;
}

// Runs one task in `child` (started by StartTrainer, perhaps a while ago) in its `folders`
// to its end and reaps it; `task_began` is when the task came.
TrainOutcome RunTask(TrainerChild& child, const TrainerProcessOptions& options,
                     const v1::Assignment& assignment, const AttemptFolders& folders,
                     Clock::time_point task_began, TrainingObserver& observer,
                     const TaskStops& stops) {
  v1::TrainerCommand start;
  *start.mutable_start()->mutable_assignment() = assignment;
  start.mutable_start()->mutable_assignment()->clear_code();
  if (assignment.code().files_size() > 0) {
    start.mutable_start()->set_code_dir(folders.rank + "/code");
  }
  // Command bytes not yet written, written as the pipe takes them: the child reads its
  // start only once its interpreter and device are up, and meanwhile what it prints must
  // be read.
  std::string pending = EncodeFrame(start);

  EventRelay relay(observer, task_began);
  LineSplitter lines;
  TrainerEnd end;
  bool exited = false, events_open = true, output_open = true;
  Clock::time_point kill_at = Clock::time_point::max(), exited_at;
  char buffer[1 << 16];
  auto log = [&](const std::string& line) { observer.OnLog(line); };
  // Reads what is there; false at the end of the pipe.
  auto drain = [&](int fd, const std::function<void(const char*, size_t)>& take) {
    const ssize_t n = read(fd, buffer, sizeof buffer);
    if (n > 0) take(buffer, static_cast<size_t>(n));
    return n > 0 || (n < 0 && (errno == EINTR || errno == EAGAIN));
  };
  for (;;) {
    pollfd fds[3] = {{events_open ? child.events.read : -1, POLLIN, 0},
                     {output_open ? child.output.read : -1, POLLIN, 0},
                     {pending.empty() ? -1 : child.commands.write, POLLOUT, 0}};
    poll(fds, 3, 100);
    if (fds[0].revents != 0) {
      events_open = drain(child.events.read, [&](const char* d, size_t n) { relay.Feed(d, n); });
    }
    if (fds[1].revents != 0) {
      output_open =
          drain(child.output.read, [&](const char* d, size_t n) { lines.Append(d, n, log); });
    }
    if (fds[2].revents & (POLLERR | POLLHUP)) {
      pending.clear();  // the child is gone; waitpid says how
    } else if (fds[2].revents & POLLOUT) {
      const ssize_t n = write(child.commands.write, pending.data(), pending.size());
      if (n > 0) pending.erase(0, static_cast<size_t>(n));
    }
    if (stops.Preempted() && !end.preempt_sent && !end.cancel_sent) {
      v1::TrainerCommand preempt;
      preempt.mutable_preempt()->set_after_step(stops.preempt_after.load());
      pending += EncodeFrame(preempt);
      end.preempt_sent = true;
    }
    if (stops.cancel.load(std::memory_order_relaxed) && !end.cancel_sent) {
      v1::TrainerCommand stop;
      stop.mutable_cancel();
      pending += EncodeFrame(stop);
      end.cancel_sent = true;
      kill_at = Clock::now() + options.cancel_grace;
    }
    if (!exited && !end.killed && Clock::now() >= kill_at) {
      kill(-child.pid, SIGKILL);
      end.killed = true;
    }
    if (!exited && waitpid(child.pid, &end.status, WNOHANG) == child.pid) {
      exited = true;
      exited_at = Clock::now();
    }
    // Once it has exited: what it wrote last is read, but a process it started that
    // still holds its output open is not waited for.
    if (exited &&
        ((!events_open && !output_open) || Clock::now() - exited_at > std::chrono::seconds(1))) {
      break;
    }
  }
  lines.Flush(log);
  kill(-child.pid, SIGKILL);  // whatever it started (torch.compile's workers) goes with it
  child.pid = -1;             // reaped
  child.commands.CloseBoth();
  child.output.CloseBoth();
  child.events.CloseBoth();
  if (assignment.job_dir().empty()) files::RemoveTree(folders.base);
  end.reported = relay.Reported();
  end.step = child.progress.Step();
  end.last_lines = lines.Last();
  return OutcomeOf(end, options);
}

TrainOutcome TrainInChildProcess(const TrainerProcessOptions& given,
                                 const v1::Assignment& assignment, TrainingObserver& observer,
                                 const TaskStops& stops) {
  const auto options = WithOwnersUser(given, assignment);
  if (!options.ok()) return Failed(std::string{options.status().message()});
  const Clock::time_point task_began = Clock::now();
  AttemptFolders folders;
  if (auto ended = PrepareTask(*options, assignment, &folders)) return *ended;
  auto child = StartTrainer(*options, &assignment, &folders);
  if (!child.ok()) {
    return Failed(std::string{child.status().message()},
                  child.status().code() != absl::StatusCode::kFailedPrecondition);
  }
  return RunTask(**child, *options, assignment, folders, task_began, observer, stops);
}

// With a user per owner, a trainer cannot start before its task: it would not know whose.
SpareTrainer::SpareTrainer(TrainerProcessOptions options, bool ahead)
    : options_(std::move(options)),
      ahead_(ahead && !options_.job_users && !options_.sandbox.enabled()),
      wanted_(ahead_),
      launcher_([this] { Launch(); }) {}

SpareTrainer::~SpareTrainer() {
  {
    const std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  launcher_.join();
  spare_.reset();  // killed, reaped
}

void SpareTrainer::Launch() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [this] { return stopping_ || (wanted_ && spare_ == nullptr); });
    if (stopping_) return;
    lock.unlock();
    // On this thread, which lives as long as the launcher: the trainer's parent-death
    // signal is tied to the thread that forked it.
    auto child = StartTrainer(options_);
    lock.lock();
    wanted_ = false;
    if (child.ok()) {
      spare_ = *std::move(child);
    } else {
      failure_ = child.status();
    }
    cv_.notify_all();
  }
}

TrainOutcome SpareTrainer::Train(const v1::Assignment& assignment, TrainingObserver& observer,
                                 const TaskStops& stops) {
  if (!ahead_) return TrainInChildProcess(options_, assignment, observer, stops);
  std::unique_ptr<TrainerChild> child;
  {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return stopping_ || spare_ != nullptr || !failure_.ok() || !wanted_; });
    if (spare_ == nullptr && !wanted_ && failure_.ok() && !stopping_) wanted_ = true;
    cv_.notify_all();
    cv_.wait(lock, [this] { return stopping_ || spare_ != nullptr || !failure_.ok(); });
    child = std::move(spare_);
    const absl::Status failure = failure_;
    failure_ = absl::OkStatus();
    if (child == nullptr) {
      wanted_ = true;  // try again for the next task
      cv_.notify_all();
      return Failed(stopping_ ? "the worker is stopping" : std::string{failure.message()},
                    failure.code() != absl::StatusCode::kFailedPrecondition);
    }
  }
  const Clock::time_point task_began = Clock::now();
  AttemptFolders folders;
  std::optional<TrainOutcome> ended = PrepareTask(options_, assignment, &folders);
  // A spare that died while it waited (its device failed, say) is replaced now.
  int status = 0;
  if (!ended && waitpid(child->pid, &status, WNOHANG) == child->pid) {
    child->pid = -1;
    auto fresh = StartTrainer(options_);
    if (!fresh.ok()) return Failed(std::string{fresh.status().message()});
    child = *std::move(fresh);
  }
  TrainOutcome outcome =
      ended ? *ended : RunTask(*child, options_, assignment, folders, task_began, observer, stops);
  child.reset();
  {
    // The next task's trainer starts now that this one's is gone: one holds the device
    // at a time.
    const std::lock_guard<std::mutex> lock(mu_);
    wanted_ = true;
  }
  cv_.notify_all();
  return outcome;
}

}  // namespace stoke::worker
