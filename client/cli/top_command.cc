// `stoke top`: every device and every unfinished job at a glance, refreshed until
// interrupted (or printed once with --once): device utilization, memory, clock, power
// and temperature from the workers' readings; jobs' progress, throughput, MFU, where
// their step time goes and what the coordinator diagnoses.
#include <unistd.h>

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

std::string Render(const v1::Cluster& cluster, const v1::ListJobsResponse& jobs) {
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
  return absl::StrCat(devices.Render(), "\n", running.Render());
}

}  // namespace

int TopCommand(CliContext& cli, bool once, double interval_seconds) {
  const bool redraw = !once && isatty(STDOUT_FILENO);
  for (;;) {
    auto cluster = cli.client.GetCluster();
    if (!cluster.ok()) return Report(cli, cluster.status());
    v1::ListJobsRequest request;
    for (auto state : {v1::JOB_STATE_RUNNING, v1::JOB_STATE_SCHEDULED, v1::JOB_STATE_PENDING,
                       v1::JOB_STATE_RESTARTING}) {
      request.add_states(state);
    }
    request.set_page_size(50);
    auto jobs = cli.client.ListJobs(request);
    if (!jobs.ok()) return Report(cli, jobs.status());
    if (cli.json) {
      std::cout << ToJson(*cluster) << "\n" << ToJson(*jobs) << std::endl;
    } else {
      if (redraw) std::cout << "\033[H\033[2J";  // home, clear
      std::cout << Render(*cluster, *jobs) << std::flush;
    }
    if (once) return kExitOk;
    std::this_thread::sleep_for(std::chrono::duration<double>(interval_seconds));
  }
}

}  // namespace stoke::client
