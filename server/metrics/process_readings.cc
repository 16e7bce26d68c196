#include "server/metrics/process_readings.h"

#include <dirent.h>
#include <sys/resource.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>

namespace stoke::server {
namespace {

// Seconds since the epoch at which the system booted (/proc/stat's btime).
std::optional<double> BootTime() {
  std::ifstream in("/proc/stat");
  std::string key;
  double value = 0;
  while (in >> key) {
    if (key == "btime" && in >> value) return value;
    in.ignore(1 << 20, '\n');
  }
  return std::nullopt;
}

double OpenFds() {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return 0;
  double count = 0;
  while (const dirent* entry = readdir(dir)) count += entry->d_name[0] != '.';
  closedir(dir);
  return count - 1;  // the descriptor reading the folder
}

}  // namespace

std::optional<ProcessReadings> ReadProcess() {
  std::ifstream in("/proc/self/stat");
  std::string line;
  if (!std::getline(in, line)) return std::nullopt;
  // The command name (field 2) may hold spaces and parentheses: fields resume after the
  // last ')'. Field 3 is the state; utime, stime are 14 and 15, starttime 22, vsize 23,
  // rss (pages) 24.
  const size_t close = line.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::istringstream fields(line.substr(close + 2));
  std::string field;
  double values[25] = {};
  for (int i = 3; i <= 24 && fields >> field; ++i) values[i] = std::strtod(field.c_str(), nullptr);
  const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
  const double page = static_cast<double>(sysconf(_SC_PAGESIZE));
  ProcessReadings r;
  r.cpu_seconds = (values[14] + values[15]) / ticks;
  r.virtual_bytes = values[23];
  r.resident_bytes = values[24] * page;
  r.open_fds = OpenFds();
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) == 0) r.max_fds = static_cast<double>(limit.rlim_cur);
  if (const auto boot = BootTime()) r.start_time_seconds = *boot + values[22] / ticks;
  return r;
}

}  // namespace stoke::server
