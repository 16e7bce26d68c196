// What the load tool reads about the coordinator it drives: the process's CPU time and
// memory from /proc/<pid>, and counters from its Prometheus /metrics endpoint.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace stoke::load {

struct ProcessUsage {
  double cpu_seconds = 0;  // user + system, all threads
  uint64_t rss_bytes = 0;
  uint64_t peak_rss_bytes = 0;  // VmHWM: the most it has held resident
};

// NOT_FOUND when no such process is running.
absl::StatusOr<ProcessUsage> ReadProcessUsage(pid_t pid);

// The body of GET http://address/path (HTTP/1.0 over loopback), or UNAVAILABLE.
absl::StatusOr<std::string> HttpGetBody(const std::string& address, const std::string& path);

// The sum of every series of `name` in a Prometheus text exposition; 0 when absent.
double SumOfMetric(const std::string& exposition, const std::string& name);

}  // namespace stoke::load
