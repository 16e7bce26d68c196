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
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_split.h"
#include "security/credential_file.h"
#include "spec/flag_sources.h"
#include "spec/log_setup.h"
#include "worker/common/task.h"
#include "worker/engine/trainer.h"
#include "worker/link/script_process.h"
#include "worker/link/task_translation.h"
#include "worker/link/trainer_process.h"
#include "worker/link/worker_agent.h"
#include "worker/runtime/devices.h"
#include "worker/runtime/warm_up.h"
#include "worker/telemetry/device_sampler.h"

using namespace stoke::worker;

namespace {

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
    *error = std::string("STOKE_FAULT_SLOW_STEP_MS=\"") + text +
             "\": expected a whole number of milliseconds from 0 to 60000";
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
// trainer embeds, else python3 on PATH.
std::string ScriptPython() {
  if (const char* chosen = std::getenv("STOKE_PYTHON"); chosen != nullptr && *chosen != '\0') {
    return chosen;
  }
  const std::string built_with = STOKE_PYTHON_EXECUTABLE;
  return built_with.empty() ? "python3" : built_with;
}

std::string Hostname() {
  char name[256] = {};
  gethostname(name, sizeof(name) - 1);
  return name;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"stoke-worker: trains the jobs a Stoke coordinator assigns, on one device"};
  const char* env_address = std::getenv("STOKE_ADDRESS");
  std::string coordinator = env_address ? env_address : "127.0.0.1:50051";
  std::string device_text;
  std::string worker_id;
  bool local = false;
  bool list_devices = false;
  int threads = 0;
  stoke::spec::LogFlags log_flags;
  app.add_option("--coordinator", coordinator,
                 "Coordinator address host:port, or several separated by commas: a leader and its "
                 "standbys ($STOKE_ADDRESS)")
      ->capture_default_str();
  std::string address_file;
  app.add_option("--coordinator-address-file", address_file,
                 "File holding the coordinator's address, re-read before every attach attempt "
                 "(a restarted coordinator may listen elsewhere); the worker exits when its "
                 "folder is removed");
  app.add_option("--device", device_text,
                 "cpu, cpu:N or cuda:N (default: cuda:0 if present, else cpu)");
  app.add_option("--id", worker_id, "Worker id, unique in the cluster (default: HOST/DEVICE)");
  app.add_flag("--local", local, "Launched by the coordinator on its own host");
  // A coordinator that was killed leaves its local workers behind; without a limit they
  // would wait, holding their devices, forever.
  double orphan_timeout = -1;
  app.add_option("--orphan-timeout", orphan_timeout,
                 "Seconds without any coordinator answering after which the worker exits, once "
                 "its running task (if any) has ended; 0: never (default: 900 for --local "
                 "workers, 0 for others, which their service manager restarts)")
      ->check(CLI::NonNegativeNumber);
  double sample_seconds = 1.0;
  app.add_option("--device-sampling", sample_seconds,
                 "Seconds between device readings (NVML or /proc); 0 turns them off")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  std::string advertise_address;
  app.add_option("--advertise-address", advertise_address,
                 "Address other ranks of a job reach this worker at (default: the address "
                 "the coordinator sees it connect from)");
  app.add_option("--threads", threads, "Intra-op CPU threads (default: all cores)");
  app.add_flag("--list-devices", list_devices, "Print the CUDA devices this process sees and exit");
  stoke::spec::AddLogFlags(app, log_flags);
  const char* env_ca = std::getenv("STOKE_TLS_CA");
  std::string tls_ca = env_ca ? env_ca : "", tls_cert, tls_key, join_token_file;
  app.add_option("--tls-ca", tls_ca, "PEM CA to verify the coordinator with: TLS ($STOKE_TLS_CA)");
  app.add_option("--tls-cert", tls_cert, "PEM client certificate (mutual TLS)");
  app.add_option("--tls-key", tls_key, "PEM private key of --tls-cert");
  app.add_option("--join-token-file", join_token_file,
                 "File holding the join token (a token of role worker) to attach with");
  std::string job_user;
  app.add_option("--job-user", job_user,
                 "Run the training processes of Python and TorchScript models (the user's code) "
                 "as this unprivileged user; for workers that run as root");
  app.footer(
      "Environment: STOKE_ADDRESS, STOKE_TLS_CA (defaults of the flags above); "
      "STOKE_TRACE_DIR, STOKE_TRACE_STEPS (Kineto traces of a few steps of every job). "
      "Test hook: STOKE_FAULT_SLOW_STEP_MS=<ms> sleeps that long in each training step, "
      "before its gradient all-reduce (a rank slowed on purpose).");
  stoke::spec::AddFlagSources(app, "STOKE_WORKER_");
  if (const auto exit = stoke::spec::ParseFlags(app, argc, argv)) return *exit;
  stoke::spec::ApplyLogFlags(log_flags);
  // Not dumpable: a process of the same user (the user's code in a training process among
  // them) cannot read this one's memory, where the join token is, through /proc or ptrace.
  prctl(PR_SET_DUMPABLE, 0);
  std::chrono::milliseconds slow_step{0};
  if (std::string error; !ReadSlowStepFault(&slow_step, &error)) {
    std::fprintf(stderr, "stoke-worker: %s\n", error.c_str());
    return 2;
  }
  if (slow_step.count() > 0) {
    spdlog::warn("test hook STOKE_FAULT_SLOW_STEP_MS: every training step sleeps {} ms",
                 slow_step.count());
  }

  try {
    if (list_devices) {
      for (const auto& d : ListCudaDevices()) {
        std::printf("%s %s %llu %s\n", d.device.Label().c_str(), d.uuid.c_str(),
                    static_cast<unsigned long long>(d.memory_total_bytes), d.name.c_str());
      }
      return 0;
    }
    DeviceRef device;
    if (device_text.empty()) {
      device = ListCudaDevices().empty() ? DeviceRef{DeviceKind::kCpu, 0}
                                         : DeviceRef{DeviceKind::kCuda, 0};
    } else if (auto parsed = ParseDeviceLabel(device_text)) {
      device = *parsed;
    } else {
      std::fprintf(stderr, "--device %s: expected cpu, cpu:N or cuda:N\n", device_text.c_str());
      return 2;
    }
    SetCpuThreads(threads);
    // Before attaching: a job assigned to this worker finds the device ready.
    const auto warm_up_began = std::chrono::steady_clock::now();
    WarmUpDevice(device);
    spdlog::info(
        "{} warmed up in {:.2f} s", device.Label(),
        std::chrono::duration<double>(std::chrono::steady_clock::now() - warm_up_began).count());
    WorkerAgent::Options options;
    options.coordinator_address = coordinator;
    options.coordinator_address_file = address_file;
    options.host = Hostname();
    options.device = DescribeDevice(device);
    options.worker_id = worker_id.empty() ? options.host + "/" + device.Label() : worker_id;
    options.local = local;
    if (orphan_timeout < 0) orphan_timeout = local ? 900 : 0;
    options.orphan_timeout = std::chrono::milliseconds(static_cast<int64_t>(orphan_timeout * 1000));
    options.advertise_address = advertise_address;
    options.tls_ca = tls_ca;
    options.tls_cert = tls_cert;
    options.tls_key = tls_key;
    for (const auto& [path, flag] :
         {std::pair{tls_key, "--tls-key"}, std::pair{join_token_file, "--join-token-file"}}) {
      const std::string warning = stoke::security::ExposedSecretWarning(path, flag);
      if (!warning.empty()) spdlog::warn("{}", warning);
    }
    if (!join_token_file.empty()) {
      auto token = stoke::security::ReadTokenFromFile(join_token_file, "--join-token-file");
      if (!token.ok()) {
        std::fprintf(stderr, "%s\n", std::string(token.status().message()).c_str());
        return 2;
      }
      options.join_token = *token;
    }
    // Blocked before any thread starts, so that every thread inherits the mask and only
    // the stopper below receives them.
    sigset_t stop_signals;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGINT);
    sigaddset(&stop_signals, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
    // Sampled on its own thread, never from the training loop.
    std::unique_ptr<DeviceSampler> sampler;
    if (sample_seconds > 0) {
      sampler = std::make_unique<DeviceSampler>(
          options.device, std::chrono::milliseconds(static_cast<int64_t>(sample_seconds * 1000)));
      if (!sampler->unavailable_reason().empty()) {
        spdlog::warn("no device readings: {}", sampler->unavailable_reason());
      }
      options.device_stats = [&sampler] { return sampler->Latest(); };
    }

    TrainingProbe probe;
    if (slow_step.count() > 0) {
      probe.before_step = [slow_step](uint64_t) { std::this_thread::sleep_for(slow_step); };
    }
    // Models whose code is the user's train in a child process (stoke-trainer).
    TrainerProcessOptions trainer;
    trainer.trainer_path = TrainerBesideThisProgram();
    trainer.device = device.Label();
    trainer.threads = threads;
    if (!job_user.empty()) {
      auto user = LookUpJobUser(job_user);
      if (!user.ok()) {
        std::fprintf(stderr, "stoke-worker: %s\n", std::string(user.status().message()).c_str());
        return 2;
      }
      if (geteuid() != 0) {
        std::fprintf(stderr,
                     "stoke-worker: --job-user %s: only a worker running as root can "
                     "run processes as another user\n",
                     job_user.c_str());
        return 2;
      }
      trainer.job_user = *user;
    }
    // On GPUs started ahead of its task (the first one now), where a start takes seconds.
    SpareTrainer spare_trainer(trainer, device.kind == DeviceKind::kCuda);
    // Script jobs' ranks, started as torchrun starts them.
    ScriptOptions script;
    script.visible_devices = VisibleDevice(device);
    script.default_python = ScriptPython();
    script.sdk_path = BesideThisProgram("python");
    script.job_user = trainer.job_user;
    // Script jobs run the user's program; models train in Stoke's loop, the user's own in
    // a training process.
    auto run_assignment = [device, probe, &spare_trainer, &script](
                              const stoke::v1::Assignment& assignment, TrainingObserver& observer,
                              const TaskStops& stops) {
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
    WorkerAgent agent(options, run_assignment);

    signal(SIGPIPE, SIG_IGN);
    std::thread stopper([&] {
      int sig = 0;
      sigwait(&stop_signals, &sig);
      spdlog::info("{} received; stopping", strsignal(sig));
      agent.Stop();
    });

    spdlog::info("stoke-worker {} on {} ({}), coordinator {}", STOKE_VERSION, device.Label(),
                 options.device.name, coordinator);
    // Returns once the stopper has called Stop(), or at once when TLS cannot be set up.
    const absl::Status run = agent.Run();
    // Wakes the stopper when Run returned by itself (TLS files unusable, or the local
    // coordinator's data dir removed); after a signal, this one stays pending, unread.
    kill(getpid(), SIGTERM);
    stopper.join();
    if (!run.ok()) {
      std::fprintf(stderr, "stoke-worker: %s\n", std::string(run.message()).c_str());
      return 2;
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "stoke-worker: %s\n", e.what());
    return 1;
  }
}
