// This process's resource use as Prometheus's client libraries export it under the
// standard process_* names (CPU seconds, resident and virtual memory, open and allowed
// file descriptors, start time), read from /proc/self. Linux only.
#pragma once

#include <cstdint>
#include <optional>

namespace stoke::server {

struct ProcessReadings {
  double cpu_seconds = 0;  // user + system
  double resident_bytes = 0;
  double virtual_bytes = 0;
  double open_fds = 0;
  double max_fds = 0;
  double start_time_seconds = 0;  // since the Unix epoch
};

// nullopt when /proc cannot be read (not Linux, or no /proc mounted).
std::optional<ProcessReadings> ReadProcess();

}  // namespace stoke::server
