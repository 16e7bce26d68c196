// What anyone who can connect must not be able to do to a coordinator (real processes on
// loopback).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/coordinator_process.h"
#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"
#include "tests/support/wait.h"

namespace stoke::testing {
namespace {

// Idle TCP connections to `address` (host:port), as many as it takes (up to `most`).
std::vector<int> OpenIdleConnections(const std::string& address, int most) {
  const size_t colon = address.rfind(':');
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(static_cast<uint16_t>(std::stoi(address.substr(colon + 1))));
  inet_pton(AF_INET, address.substr(0, colon).c_str(), &to.sin_addr);
  std::vector<int> sockets;
  for (int i = 0; i < most; ++i) {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) break;
    if (connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof to) != 0) {
      close(fd);
      break;
    }
    sockets.push_back(fd);
  }
  return sockets;
}

// gRPC 1.51 stops calling accept() for good once one accept4() fails for want of a
// descriptor. More idle connections than the coordinator may open files, closed again:
// clients and workers must be able to connect afterwards.
TEST(Hardening, ListenerAcceptsAgainAfterRunningOutOfDescriptors) {
  TempDir dir;
  CoordinatorProcess::Options options{dir.path()};
  options.local_workers = "0";
  options.max_open_files = 64;
  auto coordinator = CoordinatorProcess::Start(options);
  ASSERT_NE(coordinator, nullptr);
  ASSERT_TRUE(coordinator->client().GetCluster().ok());

  std::vector<int> flood = OpenIdleConnections(coordinator->address(), 200);
  EXPECT_GE(flood.size(), 100u);  // the kernel completes handshakes beyond the limit
  std::this_thread::sleep_for(std::chrono::seconds(2));
  for (int fd : flood) close(fd);

  // A new client, on a new connection (the test's own channel is an old one).
  auto connects = [&] {
    return RunCommand({STOKE_CLI_BINARY, "--address", coordinator->address(), "cluster"})
               .exit_code == 0;
  };
  EXPECT_TRUE(WaitFor(connects, std::chrono::seconds(90), std::chrono::seconds(1)))
      << coordinator->Log();
  const std::string log = coordinator->Log();
  EXPECT_NE(log.find("no longer accepts connections"), std::string::npos) << log;
  EXPECT_NE(log.find("restarting on " + coordinator->address()), std::string::npos) << log;
  EXPECT_TRUE(ProcessAlive(coordinator->pid()));
}

}  // namespace
}  // namespace stoke::testing
