#include "server/api/listener_watch.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace stoke::server {
namespace {

// Whether the connection from `client_port` to `port` is still waiting to be accepted: its
// server side exists in the table (the kernel completed the handshake) but belongs to no
// open file yet (inode 0). Once accept() has taken it, it has an inode.
bool WaitsForAccept(const char* table, int port, int client_port) {
  std::ifstream in(table);
  std::string line;
  std::getline(in, line);  // the header
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string slot, local, remote, state, queues, timer, retransmits, uid, timeout, inode;
    if (!(fields >> slot >> local >> remote >> state >> queues >> timer >> retransmits >> uid >>
          timeout >> inode)) {
      continue;
    }
    unsigned int local_port = 0, remote_port = 0;
    const size_t l = local.rfind(':'), r = remote.rfind(':');
    if (l == std::string::npos || r == std::string::npos ||
        !absl::SimpleHexAtoi(local.substr(l + 1), &local_port) ||
        !absl::SimpleHexAtoi(remote.substr(r + 1), &remote_port)) {
      continue;
    }
    if (static_cast<int>(local_port) == port && static_cast<int>(remote_port) == client_port) {
      return inode == "0";
    }
  }
  return false;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ListenerWatch>> ListenerWatch::Create(
    Options options, std::function<void()> on_stall) {
  const size_t colon = options.address.rfind(':');
  int port = 0;
  if (colon == std::string::npos || !absl::SimpleAtoi(options.address.substr(colon + 1), &port) ||
      port <= 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("listener watch: ", options.address, ": expected host:port"));
  }
  std::string host = options.address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  // A listener on every address is probed on loopback.
  if (host.empty() || host == "0.0.0.0") host = "127.0.0.1";
  if (host == "::") host = "::1";
  return std::unique_ptr<ListenerWatch>(
      new ListenerWatch(std::move(options), std::move(host), port, std::move(on_stall)));
}

ListenerWatch::ListenerWatch(Options options, std::string host, int port,
                             std::function<void()> on_stall)
    : options_(std::move(options)),
      host_(std::move(host)),
      port_(port),
      on_stall_(std::move(on_stall)) {}

ListenerWatch::~ListenerWatch() { Stop(); }

void ListenerWatch::Start() {
  thread_ = std::thread([this] { Run(); });
}

void ListenerWatch::Stop() {
  {
    const std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

bool ListenerWatch::ProbeStalled() {
  const bool v6 = host_.find(':') != std::string::npos;
  sockaddr_storage address{};
  socklen_t length = 0;
  if (v6) {
    auto* a = reinterpret_cast<sockaddr_in6*>(&address);
    a->sin6_family = AF_INET6;
    a->sin6_port = htons(static_cast<uint16_t>(port_));
    if (inet_pton(AF_INET6, host_.c_str(), &a->sin6_addr) != 1) return false;
    length = sizeof(sockaddr_in6);
  } else {
    auto* a = reinterpret_cast<sockaddr_in*>(&address);
    a->sin_family = AF_INET;
    a->sin_port = htons(static_cast<uint16_t>(port_));
    if (inet_pton(AF_INET, host_.c_str(), &a->sin_addr) != 1) return false;
    length = sizeof(sockaddr_in);
  }
  const int fd = socket(v6 ? AF_INET6 : AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;  // no descriptor to probe with: no evidence
  // Not connected within the patience (the accept queue is full) or refused: stalled too.
  bool stalled = true;
  if (connect(fd, reinterpret_cast<sockaddr*>(&address), length) == 0 || errno == EINPROGRESS) {
    pollfd connecting{fd, POLLOUT, 0};
    int error = 0;
    socklen_t size = sizeof error;
    if (poll(&connecting, 1, static_cast<int>(options_.patience.count())) == 1 &&
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &size) == 0 && error == 0) {
      // Connected: the kernel queued it; the listener should take it at once.
      sockaddr_storage self{};
      socklen_t self_length = sizeof self;
      getsockname(fd, reinterpret_cast<sockaddr*>(&self), &self_length);
      const int client_port = ntohs(v6 ? reinterpret_cast<sockaddr_in6*>(&self)->sin6_port
                                       : reinterpret_cast<sockaddr_in*>(&self)->sin_port);
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock, options_.patience, [this] { return stopping_; });
      // Either table: gRPC listens on IPv4 addresses through a dual-stack IPv6 socket.
      stalled = !stopping_ && (WaitsForAccept("/proc/net/tcp", port_, client_port) ||
                               WaitsForAccept("/proc/net/tcp6", port_, client_port));
    }
  }
  close(fd);
  return stalled;
}

void ListenerWatch::Run() {
  int stalled = 0;
  std::unique_lock<std::mutex> lock(mu_);
  while (!cv_.wait_for(lock, options_.interval, [this] { return stopping_; })) {
    lock.unlock();
    stalled = ProbeStalled() ? stalled + 1 : 0;
    lock.lock();
    if (stalled >= options_.stalled_probes && !stopping_) {
      spdlog::error(
          "the gRPC listener on port {} no longer accepts connections (its accept queue stays "
          "full: gRPC stops accepting after running out of file descriptors once)",
          port_);
      lock.unlock();
      on_stall_();
      return;
    }
  }
}

}  // namespace stoke::server
