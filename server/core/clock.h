// Time for the coordinator's core. Every timeout (heartbeats, the backfill window) reads
// time through a Clock, so tests drive it with FakeClock instead of sleeping.
#pragma once

#include <mutex>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace stoke::server {

class Clock {
 public:
  virtual ~Clock() = default;
  virtual absl::Time Now() = 0;
};

class RealClock final : public Clock {
 public:
  absl::Time Now() override { return absl::Now(); }
};

class FakeClock final : public Clock {
 public:
  explicit FakeClock(absl::Time start = absl::FromUnixSeconds(1'700'000'000)) : now_(start) {}
  absl::Time Now() override {
    std::lock_guard<std::mutex> lock(mu_);
    return now_;
  }
  void Advance(absl::Duration d) {
    std::lock_guard<std::mutex> lock(mu_);
    now_ += d;
  }

 private:
  std::mutex mu_;
  absl::Time now_;
};

}  // namespace stoke::server
