#include "bench/load/process_stats.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace stoke::load {

absl::StatusOr<ProcessUsage> ReadProcessUsage(pid_t pid) {
  const std::string dir = absl::StrCat("/proc/", pid);
  std::ifstream stat(dir + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return absl::NotFoundError(absl::StrCat("no process ", pid));
  // Fields after the command name (which may hold spaces), from field 3 on.
  const auto close = line.rfind(')');
  if (close == std::string::npos) return absl::DataLossError(dir + "/stat: unreadable");
  std::vector<std::string> fields = absl::StrSplit(line.substr(close + 2), ' ');
  // utime and stime are fields 14 and 15 of the whole line: 11 and 12 after the name.
  uint64_t utime = 0, stime = 0;
  if (fields.size() < 13 || !absl::SimpleAtoi(fields[11], &utime) ||
      !absl::SimpleAtoi(fields[12], &stime)) {
    return absl::DataLossError(dir + "/stat: unreadable");
  }
  ProcessUsage usage;
  usage.cpu_seconds =
      static_cast<double>(utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
  std::ifstream status(dir + "/status");
  while (std::getline(status, line)) {
    uint64_t kib = 0;
    auto read_kib = [&](const char* key) {
      if (line.rfind(key, 0) != 0) return false;
      std::istringstream in(line.substr(std::string(key).size()));
      return static_cast<bool>(in >> kib);
    };
    if (read_kib("VmRSS:")) usage.rss_bytes = kib * 1024;
    if (read_kib("VmHWM:")) usage.peak_rss_bytes = kib * 1024;
  }
  return usage;
}

absl::StatusOr<std::string> HttpGetBody(const std::string& address, const std::string& path) {
  const auto colon = address.rfind(':');
  int port = 0;
  if (colon == std::string::npos || !absl::SimpleAtoi(address.substr(colon + 1), &port)) {
    return absl::InvalidArgumentError(absl::StrCat("not host:port: ", address));
  }
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (inet_pton(AF_INET, address.substr(0, colon).c_str(), &addr.sin_addr) != 1) {
    return absl::InvalidArgumentError(absl::StrCat("not an IPv4 address: ", address));
  }
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return absl::UnavailableError("socket");
  timeval timeout{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return absl::UnavailableError(absl::StrCat("cannot connect to ", address));
  }
  const std::string request =
      absl::StrCat("GET ", path, " HTTP/1.0\r\nHost: ", address, "\r\n\r\n");
  if (write(fd, request.data(), request.size()) != static_cast<ssize_t>(request.size())) {
    close(fd);
    return absl::UnavailableError(absl::StrCat("cannot write to ", address));
  }
  std::string response;
  char buffer[16384];
  ssize_t n;
  while ((n = read(fd, buffer, sizeof(buffer))) > 0) response.append(buffer, n);
  close(fd);
  const auto body = response.find("\r\n\r\n");
  if (response.rfind("HTTP/1.", 0) != 0 || body == std::string::npos ||
      response.find(" 200 ") > response.find("\r\n")) {
    return absl::UnavailableError(absl::StrCat("GET ", path, " from ", address, " failed"));
  }
  return response.substr(body + 4);
}

double SumOfMetric(const std::string& exposition, const std::string& name) {
  double sum = 0;
  std::istringstream in(exposition);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(name, 0) != 0 || line.size() <= name.size()) continue;
    const char next = line[name.size()];
    if (next != ' ' && next != '{') continue;
    sum += std::strtod(line.c_str() + line.rfind(' ') + 1, nullptr);
  }
  return sum;
}

}  // namespace stoke::load
