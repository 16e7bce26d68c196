// Polls a condition until it holds or a deadline passes: for tests against real
// processes, where there is no event to wait on.
#pragma once

#include <chrono>
#include <functional>
#include <thread>

namespace stoke::testing {

inline bool WaitFor(const std::function<bool()>& condition,
                    std::chrono::milliseconds timeout = std::chrono::seconds(30),
                    std::chrono::milliseconds poll = std::chrono::milliseconds(50)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (condition()) return true;
    std::this_thread::sleep_for(poll);
  }
  return condition();
}

}  // namespace stoke::testing
