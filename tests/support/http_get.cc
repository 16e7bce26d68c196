#include "tests/support/http_get.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <sstream>

namespace stoke::testing {

HttpResponse HttpRequest(const std::string& address, const std::string& path,
                         const std::string& header) {
  HttpResponse result;
  auto colon = address.rfind(':');
  if (colon == std::string::npos) return result;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(std::stoi(address.substr(colon + 1))));
  if (inet_pton(AF_INET, address.substr(0, colon).c_str(), &addr.sin_addr) != 1) return result;
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return result;
  std::string response;
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
    std::string request = "GET " + path + " HTTP/1.0\r\nHost: " + address + "\r\n" +
                          (header.empty() ? "" : header + "\r\n") + "\r\n";
    if (write(fd, request.data(), request.size()) == static_cast<ssize_t>(request.size())) {
      char buf[8192];
      ssize_t n;
      while ((n = read(fd, buf, sizeof(buf))) > 0) response.append(buf, static_cast<size_t>(n));
    }
  }
  close(fd);
  // "HTTP/1.1 200 OK"
  const auto space = response.find(' ');
  if (space != std::string::npos) result.status = std::atoi(response.c_str() + space + 1);
  auto body = response.find("\r\n\r\n");
  if (body != std::string::npos) result.body = response.substr(body + 4);
  return result;
}

std::string HttpGet(const std::string& address, const std::string& path) {
  return HttpRequest(address, path).body;
}

double SampleValue(const std::string& exposition, const std::string& series) {
  std::istringstream in(exposition);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(series + " ", 0) == 0) return std::stod(line.substr(series.size() + 1));
  }
  return -1;
}

}  // namespace stoke::testing
