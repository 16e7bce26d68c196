// `stoke top`: every device and every unfinished job at a glance, refreshed until
// interrupted (or printed once with --once): device utilization, memory, clock, power
// and temperature from the workers' readings; jobs' progress, throughput, MFU, where
// their step time goes and what the coordinator diagnoses.
#include <poll.h>
#include <termios.h>
#include <unistd.h>

#include <csignal>
#include <optional>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <map>
#include <thread>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "client/cli/commands.h"
#include "client/cli/format.h"

namespace stoke::client {
namespace {

std::string Percent(double ratio) { return absl::StrFormat("%.0f%%", ratio * 100); }

std::string DiagnosisList(const v1::MetricSample& m) {
  std::vector<std::string> names;
  for (int d : m.diagnoses()) names.push_back(DiagnosisName(d));
  return names.empty() ? "-" : absl::StrJoin(names, ",");
}

// `columns` > 0: no line wider than that (columns dropped from the right, then cut).
std::string Render(const v1::Cluster& cluster, const v1::ListJobsResponse& jobs, size_t columns) {
  Table devices({"WORKER", "DEVICE", "UTIL", "MEMORY", "CLOCK", "POWER", "TEMP", "JOB"});
  for (const auto& w : cluster.workers()) {
    const auto& s = w.device_stats();
    const bool has = w.has_device_stats();
    devices.AddRow(
        {w.id(), DeviceLabel(w.device()), has ? Percent(s.utilization()) : "-",
         has ? FormatBytes(s.memory_used_bytes()) + " / " + FormatBytes(s.memory_total_bytes())
             : "-",
         has && s.has_sm_clock_hz() ? absl::StrFormat("%.0f MHz", s.sm_clock_hz() / 1e6) : "-",
         has && s.has_power_watts() ? absl::StrFormat("%.0f W", s.power_watts()) : "-",
         has && s.has_temperature_celsius() ? absl::StrFormat("%.0f C", s.temperature_celsius())
                                            : "-",
         w.job_id().empty() ? "-" : absl::StrCat(w.job_id(), "/", w.rank())});
  }
  Table running({"JOB", "NAME", "STATE", "STEP", "SAMPLES/S", "MFU", "STEP TIME", "DATA WAIT",
                 "COMM WAIT", "MEMORY", "DIAGNOSIS"});
  for (const auto& job : jobs.jobs()) {
    const auto& m = job.latest_metrics();
    const bool live = job.state() == v1::JOB_STATE_RUNNING && m.total_steps() > 0;
    running.AddRow({job.id(), job.spec().name(), ShortStateName(job.state()),
                    m.total_steps() ? absl::StrFormat("%d/%d", m.step(), m.total_steps()) : "-",
                    live ? FormatRate(m.samples_per_second()) : "-",
                    live && m.mfu() > 0 ? Percent(m.mfu()) : "-",
                    live ? absl::StrFormat("%.1f ms", m.step_seconds() * 1e3) : "-",
                    live ? Percent(m.data_wait_ratio()) : "-",
                    live && job.placement_size() > 1 ? Percent(m.comm_wait_ratio()) : "-",
                    m.memory_allocated_bytes() ? FormatBytes(m.memory_allocated_bytes()) : "-",
                    live ? DiagnosisList(m) : "-"});
  }
  return absl::StrCat(devices.Render(columns), "\n", running.Render(columns));
}

// While it lives, the terminal on stdin hands over each key as it is pressed, unechoed (so
// that `q` quits without Enter); restored on the way out, and on Ctrl-C, which only
// interrupts the wait (SIGINT's handler sets a flag).
class KeyReader {
 public:
  KeyReader() {
    if (!isatty(STDIN_FILENO) || tcgetattr(STDIN_FILENO, &saved_) != 0) return;
    termios raw = saved_;
    raw.c_lflag &= ~static_cast<tcflag_t>(ICANON | ECHO);
    raw.c_cc[VMIN] = 0;
    raw.c_cc[VTIME] = 0;
    active_ = tcsetattr(STDIN_FILENO, TCSANOW, &raw) == 0;
    struct sigaction on_interrupt {};
    on_interrupt.sa_handler = [](int) { interrupted_ = 1; };
    sigaction(SIGINT, &on_interrupt, &saved_interrupt_);
  }
  ~KeyReader() {
    if (!active_) return;
    tcsetattr(STDIN_FILENO, TCSANOW, &saved_);
    sigaction(SIGINT, &saved_interrupt_, nullptr);
  }
  KeyReader(const KeyReader&) = delete;
  KeyReader& operator=(const KeyReader&) = delete;

  // Waits up to `seconds`; true if `q` (or Q, or Ctrl-C) asks to quit.
  bool WaitForQuit(double seconds) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    for (;;) {
      if (interrupted_) return true;
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return false;
      pollfd in{STDIN_FILENO, POLLIN, 0};
      const int ready =
          poll(active_ ? &in : nullptr, active_ ? 1 : 0, static_cast<int>(left.count()));
      if (ready <= 0) continue;  // timed out, or a signal (checked above)
      char key = 0;
      if (read(STDIN_FILENO, &key, 1) == 1 && (key == 'q' || key == 'Q')) return true;
    }
  }

 private:
  static inline volatile std::sig_atomic_t interrupted_ = 0;
  termios saved_{};
  struct sigaction saved_interrupt_ {};
  bool active_ = false;
};

}  // namespace

int TopCommand(CliContext& cli, bool once, double interval_seconds) {
  const bool redraw = !once && isatty(STDOUT_FILENO);
  std::optional<KeyReader> keys;
  if (redraw) keys.emplace();
  for (;;) {
    auto cluster = cli.client.GetCluster();
    if (!cluster.ok()) return Report(cli, cluster.status());
    v1::ListJobsRequest request;
    for (auto state : {v1::JOB_STATE_RUNNING, v1::JOB_STATE_SCHEDULED, v1::JOB_STATE_PENDING,
                       v1::JOB_STATE_RESTARTING, v1::JOB_STATE_PREEMPTED}) {
      request.add_states(state);
    }
    request.set_page_size(50);
    auto jobs = cli.client.ListJobs(request);
    if (!jobs.ok()) return Report(cli, jobs.status());
    if (cli.json) {
      std::cout << ToJson(*cluster) << "\n" << ToJson(*jobs) << std::endl;
    } else {
      if (redraw) std::cout << "\033[H\033[2J";  // home, clear
      // Live, every line fits the terminal (one column spare, as some wrap on the last).
      const int columns = redraw ? TerminalColumns(STDOUT_FILENO) : 0;
      std::cout << Render(*cluster, *jobs, columns > 1 ? static_cast<size_t>(columns - 1) : 0);
      if (redraw) std::cout << "(q quits)";
      std::cout << std::flush;
    }
    if (once) return kExitOk;
    if (keys) {
      if (keys->WaitForQuit(interval_seconds)) {
        std::cout << "\n";
        return kExitOk;
      }
    } else {
      std::this_thread::sleep_for(std::chrono::duration<double>(interval_seconds));
    }
  }
}

}  // namespace stoke::client
