// Watches that the gRPC listener still accepts connections. gRPC 1.51 stops calling
// accept() for good after one accept4() fails with EMFILE: anyone who can open enough idle
// connections leaves the coordinator deaf, even once they are closed. The watch connects
// to the listening port now and then and looks its own connection up in /proc/net/tcp{,6}:
// the kernel completes the handshake either way (until the accept queue is full), but only
// accept() gives the server's side an inode. A connection still without one a second
// later, or none made at all, twice in a row, means the listener has stalled, and
// `on_stall` is called (once). Protocol-blind, so TLS and plaintext alike.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "absl/status/statusor.h"

namespace stoke::server {

class ListenerWatch {
 public:
  struct Options {
    // The listener's bound address (host:port; 0.0.0.0 and :: are probed on loopback).
    std::string address;
    std::chrono::milliseconds interval{5'000};
    // How long a probe connection may wait in the accept queue.
    std::chrono::milliseconds patience{1'000};
    // Stalled probes in a row that make a stall.
    int stalled_probes = 2;
  };

  // INVALID_ARGUMENT for an address that is not host:port.
  static absl::StatusOr<std::unique_ptr<ListenerWatch>> Create(Options options,
                                                               std::function<void()> on_stall);
  ~ListenerWatch();
  ListenerWatch(const ListenerWatch&) = delete;
  ListenerWatch& operator=(const ListenerWatch&) = delete;

  void Start();
  void Stop();

 private:
  ListenerWatch(Options options, std::string host, int port, std::function<void()> on_stall);
  void Run();
  // True when a probe connection still waited to be accepted after `patience`, or could
  // not even be made (refused, or the accept queue full); false when it was taken, or when
  // this process had no descriptor to probe with (no evidence either way).
  bool ProbeStalled();

  const Options options_;
  const std::string host_;
  const int port_;
  const std::function<void()> on_stall_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace stoke::server
