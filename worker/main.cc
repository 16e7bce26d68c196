// stoke-worker: one process per device. Attaches to a coordinator, registers its device,
// and trains what it is assigned until SIGINT or SIGTERM.
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "security/credential_file.h"
#include "spec/flag_sources.h"
#include "spec/log_setup.h"
#include "worker/common/byte_units.h"
#include "worker/common/task.h"
#include "worker/engine/trainer.h"
#include "worker/link/script_process.h"
#include "worker/link/task_translation.h"
#include "worker/link/trainer_process.h"
#include "worker/link/worker_agent.h"
#include "worker/runtime/devices.h"
#include "worker/runtime/warm_up.h"
#include "worker/telemetry/device_sampler.h"
#include "worker/worker_flags.h"

namespace stoke::worker {
namespace {

// Prints `line` on stderr and returns 2, the exit status of a worker that cannot work as
// told: a flag, a file or a user that will not do, or a link that cannot be set up.
int Fail(absl::string_view line) {
  std::fprintf(stderr, "%s\n", std::string{line}.c_str());
  return 2;
}

// A test hook: STOKE_FAULT_SLOW_STEP_MS=<ms> makes every training step of this worker
// sleep that long before its forward pass, so before backward's gradient all-reduce: a
// rank made slow on purpose, to test straggler detection with real processes. Read once,
// at start. False (and `error` set) when it is set to anything but 0 to 60000.
bool ReadSlowStepFault(std::chrono::milliseconds* out, std::string* error) {
  const char* text = std::getenv("STOKE_FAULT_SLOW_STEP_MS");
  *out = std::chrono::milliseconds(0);
  if (text == nullptr || *text == '\0') return true;
  char* end = nullptr;
  const int64_t ms = std::strtoll(text, &end, 10);
  if (*end != '\0' || ms < 0 || ms > 60000) {
    *error = absl::StrCat("STOKE_FAULT_SLOW_STEP_MS=\"", text,
                          "\": expected a whole number of milliseconds from 0 to 60000");
    return false;
  }
  *out = std::chrono::milliseconds(ms);
  return true;
}

// CUDA_VISIBLE_DEVICES for a script job's program: this worker's device as the host
// numbers it (through the worker's own CUDA_VISIBLE_DEVICES, if it has one); "" on a CPU
// worker, which hides every GPU from the program.
std::string VisibleDevice(const DeviceRef& device) {
  if (device.kind != DeviceKind::kCuda) return "";
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  if (visible != nullptr && *visible != '\0') {
    const std::vector<std::string> listed = absl::StrSplit(visible, ',');
    if (static_cast<size_t>(device.index) < listed.size()) return listed[device.index];
  }
  return std::to_string(device.index);
}

// A script job's "python" when its spec names none: $STOKE_PYTHON, else the Python the
// trainer embeds, else ScriptOptions' own (python3 on PATH).
std::string ScriptPython() {
  if (const char* chosen = std::getenv("STOKE_PYTHON"); chosen != nullptr && *chosen != '\0') {
    return chosen;
  }
  const std::string built_with = STOKE_PYTHON_EXECUTABLE;
  return built_with.empty() ? ScriptOptions{}.default_python : built_with;
}

std::string Hostname() {
  char name[256] = {};
  gethostname(name, sizeof(name) - 1);
  return name;
}

// --list-devices: one line per CUDA device this process sees.
int ListDevices() {
  for (const auto& d : ListCudaDevices()) {
    std::printf("%s %s %llu %s\n", d.device.Label().c_str(), d.uuid.c_str(),
                static_cast<unsigned long long>(d.memory_total_bytes), d.name.c_str());
  }
  return 0;
}

// --device, or cuda:0 if there is one, else cpu. The status message is the line to print.
absl::StatusOr<DeviceRef> ChooseDevice(const std::string& text) {
  if (text.empty()) {
    return ListCudaDevices().empty() ? DeviceRef{DeviceKind::kCpu, 0}
                                     : DeviceRef{DeviceKind::kCuda, 0};
  }
  if (auto parsed = ParseDeviceLabel(text)) return *parsed;
  return absl::InvalidArgumentError(
      absl::StrCat("--device ", text, ": expected cpu, cpu:N or cuda:N"));
}

// Before attaching: a job assigned to this worker finds the device ready.
void WarmUp(const DeviceRef& device) {
  const auto began = std::chrono::steady_clock::now();
  WarmUpDevice(device);
  spdlog::info("{} warmed up in {:.2f} s", device.Label(),
               std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count());
}

// The link's options: the flags', completed with this host and device and the join
// token. The status message is the line to print.
absl::StatusOr<WorkerAgent::Options> AgentOptions(const WorkerFlags& flags,
                                                  const DeviceRef& device) {
  WorkerAgent::Options options = flags.agent;
  options.host = Hostname();
  options.device = DescribeDevice(device);
  if (options.worker_id.empty()) options.worker_id = options.host + "/" + device.Label();
  options.orphan_timeout = flags.OrphanTimeout();
  options.stop_grace = Milliseconds(flags.stop_grace_seconds);
  for (const auto& [path, flag] : {std::pair{flags.agent.tls_key, "--tls-key"},
                                   std::pair{flags.join_token_file, "--join-token-file"}}) {
    const std::string warning = security::ExposedSecretWarning(path, flag);
    if (!warning.empty()) spdlog::warn("{}", warning);
  }
  if (!flags.join_token_file.empty()) {
    auto token = security::ReadTokenFromFile(flags.join_token_file, "--join-token-file");
    if (!token.ok()) return token.status();
    options.join_token = *token;
  }
  return options;
}

// Refuses `flag` with `value` to a worker that does not run as root.
absl::Status NeedsRoot(const std::string& flag, const std::string& value) {
  if (geteuid() == 0) return absl::OkStatus();
  return absl::PermissionDeniedError(absl::StrCat(
      flag, " ", value, ": only a worker running as root can run processes as other users"));
}

// Who user code runs as: --job-users (a uid per owner) or --job-user (one for all), both
// for a worker that runs as root.
absl::Status SetJobUsers(const WorkerFlags& flags, TrainerProcessOptions& trainer) {
  // A sandboxing root worker never runs user code as root: a uid per owner unless told.
  const bool default_range =
      flags.sandbox && geteuid() == 0 && flags.job_users.empty() && flags.job_user.empty();
  const std::string job_users = default_range ? kDefaultJobUsers : flags.job_users;
  if (!job_users.empty()) {
    auto range = ParseUidRange(job_users);
    if (!range.ok()) return range.status();
    if (auto s = NeedsRoot("--job-users", job_users); !s.ok()) return s;
    trainer.job_users = *range;
    trainer.job_users_table = flags.job_users_table;
  }
  if (flags.job_user.empty()) return absl::OkStatus();
  auto user = LookUpJobUser(flags.job_user);
  if (!user.ok()) return user.status();
  if (auto s = NeedsRoot("--job-user", flags.job_user); !s.ok()) return s;
  trainer.job_user = *user;
  return absl::OkStatus();
}

// --sandbox: stoke-sandbox beside this program, the worker's programs readable inside, its
// credentials hidden, and each attempt's limits. (As root, SetJobUsers has given it a user.)
absl::StatusOr<SandboxSettings> Sandbox(const WorkerFlags& flags, const DeviceRef& device) {
  SandboxSettings sandbox;
  if (!flags.sandbox) return sandbox;
  sandbox.program = BesideThisProgram("stoke-sandbox");
  if (sandbox.program.empty()) {
    return absl::FailedPreconditionError("--sandbox: no stoke-sandbox beside stoke-worker");
  }
  sandbox.read_only = {sandbox.program.substr(0, sandbox.program.rfind('/'))};
  for (const std::string& secret :
       {flags.join_token_file, flags.agent.tls_key, flags.agent.tls_cert, flags.job_users_table}) {
    if (!secret.empty()) sandbox.hidden.push_back(secret);
  }
  if (flags.job_memory.empty()) {
    sandbox.memory_bytes = DefaultJobMemory(device.kind == DeviceKind::kCuda);
  } else {
    if (!ParseByteCount(flags.job_memory, &sandbox.memory_bytes) || sandbox.memory_bytes == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--job-memory ", flags.job_memory, ": expected a byte count like 16G, 512M or 1048576"));
    }
  }
  sandbox.pids = flags.job_pids;
  return sandbox;
}

// How models whose code is the user's train: in a child process (stoke-trainer), as a job
// user and in a sandbox when the flags say so. The status message is the line to print.
absl::StatusOr<TrainerProcessOptions> TrainerOptions(const WorkerFlags& flags,
                                                     const DeviceRef& device) {
  TrainerProcessOptions trainer;
  trainer.trainer_path = TrainerBesideThisProgram();
  trainer.device = device.Label();
  trainer.threads = flags.threads;
  absl::Status users = SetJobUsers(flags, trainer);
  auto sandbox = users.ok() ? Sandbox(flags, device) : users;
  if (!sandbox.ok()) {
    return absl::Status(sandbox.status().code(),
                        absl::StrCat("stoke-worker: ", sandbox.status().message()));
  }
  trainer.sandbox = *sandbox;
  return trainer;
}

// Script jobs' ranks, started as torchrun starts them.
ScriptOptions ScriptRunOptions(const DeviceRef& device, const TrainerProcessOptions& trainer) {
  ScriptOptions script;
  script.visible_devices = VisibleDevice(device);
  script.default_python = ScriptPython();
  script.sdk_path = BesideThisProgram("python");
  script.job_user = trainer.job_user;
  script.job_users = trainer.job_users;
  script.job_users_table = trainer.job_users_table;
  script.sandbox = trainer.sandbox;
  return script;
}

// Script jobs run the user's program; models train in Stoke's loop, the user's own in a
// training process (on GPUs started ahead of its task, where a start takes seconds).
TrainFunction RunAssignment(const DeviceRef& device, const TrainingProbe& probe,
                            SpareTrainer& spare_trainer, const ScriptOptions& script) {
  return
      [device, probe, &spare_trainer, &script](const stoke::v1::Assignment& assignment,
                                               TrainingObserver& observer, const TaskStops& stops) {
        if (assignment.spec().has_command()) {
          return RunScript(script, assignment, observer, stops.cancel);
        }
        auto task = TaskFromAssignment(assignment);
        if (!task.ok()) {
          return TrainOutcome{TrainOutcome::Kind::kFailed, std::string{task.status().message()},
                              /*retryable=*/false};
        }
        if (IsUserCode(task->model)) return spare_trainer.Train(assignment, observer, stops);
        TrainingProbe run_probe = probe;
        run_probe.preempt_after = &stops.preempt_after;
        return RunTraining(*task, device, observer, stops.cancel, run_probe);
      };
}

// Runs the agent until SIGINT or SIGTERM (blocked by the caller), which a thread of its
// own takes, or until the agent returns by itself.
int Serve(WorkerAgent& agent, const sigset_t& stop_signals) {
  signal(SIGPIPE, SIG_IGN);
  std::thread stopper([&] {
    int sig = 0;
    sigwait(&stop_signals, &sig);
    spdlog::info("{} received; stopping", strsignal(sig));
    agent.Stop();
  });
  // Returns once the stopper has called Stop(), or at once when TLS cannot be set up.
  const absl::Status run = agent.Run();
  // Wakes the stopper when Run returned by itself (TLS files unusable, or the local
  // coordinator's data dir removed); after a signal, this one stays pending, unread.
  kill(getpid(), SIGTERM);
  stopper.join();
  if (!run.ok()) return Fail(absl::StrCat("stoke-worker: ", run.message()));
  return 0;
}

// Everything after the flags: the device, the link's options, the trainers, then serving.
int RunWorker(const WorkerFlags& flags, std::chrono::milliseconds slow_step) {
  if (flags.list_devices) return ListDevices();
  const auto device = ChooseDevice(flags.device);
  if (!device.ok()) return Fail(device.status().message());
  SetCpuThreads(flags.threads);
  WarmUp(*device);
  auto options = AgentOptions(flags, *device);
  if (!options.ok()) return Fail(options.status().message());
  // Blocked before any thread starts, so that every thread inherits the mask and only
  // Serve's stopper receives them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  // Sampled on its own thread, never from the training loop.
  std::unique_ptr<DeviceSampler> sampler;
  if (flags.sampling_seconds > 0) {
    sampler =
        std::make_unique<DeviceSampler>(options->device, Milliseconds(flags.sampling_seconds));
    if (!sampler->unavailable_reason().empty()) {
      spdlog::warn("no device readings: {}", sampler->unavailable_reason());
    }
    options->device_stats = [&sampler] { return sampler->Latest(); };
  }
  TrainingProbe probe;
  if (slow_step.count() > 0) {
    probe.before_step = [slow_step](uint64_t) { std::this_thread::sleep_for(slow_step); };
  }
  const auto trainer = TrainerOptions(flags, *device);
  if (!trainer.ok()) return Fail(trainer.status().message());
  SpareTrainer spare_trainer(*trainer, device->kind == DeviceKind::kCuda);
  const ScriptOptions script = ScriptRunOptions(*device, *trainer);
  WorkerAgent agent(*options, RunAssignment(*device, probe, spare_trainer, script));
  spdlog::info("stoke-worker {} on {} ({}), coordinator {}", STOKE_VERSION, device->Label(),
               options->device.name, options->coordinator_address);
  return Serve(agent, stop_signals);
}

// Reads the flags and the test hook, then runs the worker.
int RunFromCommandLine(int argc, char** argv) {
  CLI::App app{"stoke-worker: trains the jobs a Stoke coordinator assigns, on one device"};
  WorkerFlags flags;
  AddWorkerFlags(app, &flags);
  spec::AddFlagSources(app, "STOKE_WORKER_");
  if (const auto exit = spec::ParseFlags(app, argc, argv)) return *exit;
  spec::ApplyLogFlags(flags.log);
  // Not dumpable: a process of the same user (the user's code in a training process among
  // them) cannot read this one's memory, where the join token is, through /proc or ptrace.
  prctl(PR_SET_DUMPABLE, 0);
  std::chrono::milliseconds slow_step{0};
  if (std::string error; !ReadSlowStepFault(&slow_step, &error)) {
    return Fail("stoke-worker: " + error);
  }
  if (slow_step.count() > 0) {
    spdlog::warn("test hook STOKE_FAULT_SLOW_STEP_MS: every training step sleeps {} ms",
                 slow_step.count());
  }
  return RunWorker(flags, slow_step);
}

}  // namespace
}  // namespace stoke::worker

int main(int argc, char** argv) {
  try {
    return stoke::worker::RunFromCommandLine(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "stoke-worker: %s\n", e.what());
    return 1;
  }
}
