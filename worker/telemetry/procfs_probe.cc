// CPU workers' readings from /proc: this process's CPU time against the machine's cores,
// its resident memory against the machine's, and the cores' mean clock.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <iterator>
#include <sstream>

#include "worker/telemetry/device_sampler.h"

namespace stoke::worker {
namespace {

// utime + stime of this process, in seconds (fields 14 and 15 of /proc/self/stat; the
// command name in field 2 may hold spaces, so count from its closing parenthesis).
std::optional<double> ProcessCpuSeconds() {
  std::ifstream in("/proc/self/stat");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto close = text.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::istringstream fields(text.substr(close + 2));
  std::string field;
  unsigned long long utime = 0, stime = 0;
  for (int i = 3; i <= 15 && fields >> field; ++i) {
    if (i == 14) utime = std::stoull(field);
    if (i == 15) stime = std::stoull(field);
  }
  return static_cast<double>(utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

uint64_t ResidentBytes() {
  std::ifstream in("/proc/self/statm");
  uint64_t size = 0, resident = 0;
  in >> size >> resident;
  return resident * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
}

uint64_t MachineMemoryBytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  uint64_t kib = 0;
  std::string unit;
  while (in >> key >> kib >> unit) {
    if (key == "MemTotal:") return kib * 1024;
  }
  return 0;
}

std::optional<double> MeanCpuClockHz() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  double sum = 0;
  int count = 0;
  while (std::getline(in, line)) {
    if (line.rfind("cpu MHz", 0) != 0) continue;
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    sum += std::stod(line.substr(colon + 1));
    ++count;
  }
  if (count == 0) return std::nullopt;
  return sum / count * 1e6;
}

class ProcfsProbe final : public DeviceProbe {
 public:
  ProcfsProbe() : cores_(std::max(1L, sysconf(_SC_NPROCESSORS_ONLN))) {}

  std::optional<DeviceStats> Read() override {
    const auto now = std::chrono::steady_clock::now();
    const std::optional<double> cpu = ProcessCpuSeconds();
    if (!cpu) return std::nullopt;
    DeviceStats stats;
    stats.source = "procfs";
    if (last_cpu_) {
      const double wall = std::chrono::duration<double>(now - last_time_).count();
      if (wall > 0) {
        stats.utilization = std::clamp((*cpu - *last_cpu_) / (wall * cores_), 0.0, 1.0);
      }
    }
    last_cpu_ = cpu;
    last_time_ = now;
    stats.memory_used_bytes = ResidentBytes();
    stats.memory_total_bytes = MachineMemoryBytes();
    stats.sm_clock_hz = MeanCpuClockHz();
    return stats;
  }

 private:
  const long cores_;
  std::optional<double> last_cpu_;
  std::chrono::steady_clock::time_point last_time_;
};

}  // namespace

std::unique_ptr<DeviceProbe> MakeProcfsProbe() { return std::make_unique<ProcfsProbe>(); }

}  // namespace stoke::worker
