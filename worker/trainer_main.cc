// stoke-trainer: the child process in which a worker trains a model whose code is the
// user's (Python and TorchScript models), so that a crash in that code ends this process
// and not the worker. Started by the worker (worker/link/trainer_process.h), never by
// hand: it starts its interpreter and device, then reads its task from standard input,
// trains it with the same engine as the worker, and reports on descriptor 3, writing the
// step it begins into the page on descriptor 4.
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>

#include "stoke/v1/trainer.pb.h"
#include "worker/common/task.h"
#include "worker/engine/trainer.h"
#include "worker/link/frames.h"
#include "worker/link/task_translation.h"
#include "worker/python/python_models.h"
#include "worker/runtime/devices.h"
#include "worker/runtime/warm_up.h"

using namespace stoke::worker;

namespace {

constexpr int kCommands = 0;
constexpr int kEvents = 3;
constexpr int kProgress = 4;

// Reports as events on the pipe to the worker; called from the training thread (and the
// start-up code before it), one frame at a time.
class EventWriter final : public TrainingObserver {
 public:
  void Send(const stoke::v1::TrainerEvent& event) {
    const std::lock_guard<std::mutex> lock(mu_);
    WriteFrame(kEvents, event);  // a worker that is gone cannot be told
  }
  void OnStarted() override {
    stoke::v1::TrainerEvent event;
    event.mutable_started();
    Send(event);
  }
  void OnFirstStep(const StartupTimes& times) override {
    stoke::v1::TrainerEvent event;
    auto* first = event.mutable_first_step();
    *first->mutable_startup() = ToProto(times);
    first->set_completed_at_monotonic_ns(
        std::chrono::duration_cast<std::chrono::nanoseconds>(times.completed_at.time_since_epoch())
            .count());
    Send(event);
  }
  void OnMetrics(const MetricSample& sample) override {
    stoke::v1::TrainerEvent event;
    *event.mutable_metrics() = ToProto(sample);
    Send(event);
  }
  void OnLog(const std::string& line) override {
    stoke::v1::TrainerEvent event;
    event.set_log(line);
    Send(event);
  }

 private:
  std::mutex mu_;
};

// The page the worker reads the current step from when this process dies.
std::atomic<uint64_t>* MapProgressPage() {
  void* page = mmap(nullptr, sizeof(uint64_t), PROT_READ | PROT_WRITE, MAP_SHARED, kProgress, 0);
  return page == MAP_FAILED ? nullptr : static_cast<std::atomic<uint64_t>*>(page);
}

[[noreturn]] void Finish(EventWriter& events, const TrainOutcome& outcome, const std::string& job,
                         uint32_t attempt) {
  stoke::v1::TrainerEvent event;
  auto* finished = event.mutable_finished();
  finished->set_job_id(job);
  finished->set_attempt(attempt);
  finished->set_outcome(ToProto(outcome.kind));
  finished->set_message(outcome.message);
  finished->set_retryable(outcome.retryable);
  events.Send(event);
  std::fflush(stdout);
  std::fflush(stderr);
  // No exit handlers: Python's (and torch.compile's worker pools') could hang a process
  // whose work is done; the worker ends what this one started.
  std::_Exit(0);
}

}  // namespace

int main(int argc, char** argv) {
  const auto began = std::chrono::steady_clock::now();
  CLI::App app{"stoke-trainer: trains one task for stoke-worker (started by it, not by hand)"};
  std::string device_text = "cpu";
  int threads = 0;
  app.add_option("--device", device_text, "cpu:N or cuda:N");
  app.add_option("--threads", threads, "Intra-op CPU threads (0: all cores)");
  CLI11_PARSE(app, argc, argv);
  signal(SIGPIPE, SIG_IGN);
  const auto device = ParseDeviceLabel(device_text);
  if (!device) {
    std::fprintf(stderr, "stoke-trainer: --device %s: expected cpu:N or cuda:N\n",
                 device_text.c_str());
    return 2;
  }
  EventWriter events;
  std::atomic<uint64_t>* progress = MapProgressPage();

  // What every task needs, before the task is read: the interpreter (torch imported) and
  // the device's context and libraries.
  std::string python_error;
  try {
    if (python::Available()) python::Start(python::DefaultExecutable());
  } catch (const std::exception& e) {
    python_error = e.what();
  }
  SetCpuThreads(threads);
  try {
    WarmUpDevice(*device);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "stoke-trainer: %s cannot be used: %s\n", device->Label().c_str(),
                 e.what());
    return 3;
  }
  stoke::v1::TrainerEvent ready;
  const auto ready_at = std::chrono::steady_clock::now();
  ready.mutable_ready()->set_seconds(std::chrono::duration<double>(ready_at - began).count());
  ready.mutable_ready()->set_ready_at_monotonic_ns(
      std::chrono::duration_cast<std::chrono::nanoseconds>(ready_at.time_since_epoch()).count());
  events.Send(ready);

  stoke::v1::TrainerCommand command;
  if (ReadFrame(kCommands, &command) != FrameRead::kMessage || !command.has_start()) return 4;
  const stoke::v1::Assignment& assignment = command.start().assignment();
  auto task = TaskFromAssignment(assignment);
  if (!task.ok()) {
    Finish(events, {TrainOutcome::Kind::kFailed, std::string(task.status().message()), false},
           assignment.job_id(), assignment.attempt());
  }
  if (auto* config = std::get_if<PythonConfig>(&task->model)) {
    if (!python_error.empty()) {
      Finish(events, {TrainOutcome::Kind::kFailed, "model.python: " + python_error, false},
             task->job_id, task->attempt);
    }
    config->code_dir = command.start().code_dir();
    // In the attempt's own folder (the code's), not the worker's working directory: a
    // file of the worker's there is not the user's to import or open by a relative path.
    const std::string& code_dir = config->code_dir;
    const std::string attempt_dir = code_dir.substr(0, code_dir.find_last_of('/'));
    if (!attempt_dir.empty() && chdir(attempt_dir.c_str()) != 0) {
      Finish(
          events,
          {TrainOutcome::Kind::kFailed,
           "cannot enter the attempt's folder " + attempt_dir + ": " + std::strerror(errno), false},
          task->job_id, task->attempt);
    }
  }

  // Commands after the start: a preemption, a cancel, or the end of input (the worker is
  // gone).
  static TaskStops stops;  // the detached reader may outlive main's frame
  std::thread commands([] {
    stoke::v1::TrainerCommand next;
    while (ReadFrame(kCommands, &next) == FrameRead::kMessage) {
      if (next.has_cancel()) break;
      if (next.has_preempt()) stops.preempt_after = next.preempt().after_step();
    }
    stops.cancel = true;
  });
  commands.detach();

  TrainingProbe probe;
  probe.preempt_after = &stops.preempt_after;
  probe.build_network = python::BuildNetwork;
  if (progress != nullptr) {
    probe.before_step = [progress](uint64_t step) {
      progress->store(step, std::memory_order_relaxed);
    };
  }
  const TrainOutcome outcome = RunTraining(*task, *device, events, stops.cancel, probe);
  Finish(events, outcome, task->job_id, task->attempt);
}
