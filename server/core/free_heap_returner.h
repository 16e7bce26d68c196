// Gives memory the coordinator has freed back to the system. glibc keeps what a burst of
// allocations freed (thousands of watch streams closing, a large page of jobs) in its
// arenas for reuse, so without this the coordinator's resident memory only ever grows:
// 2,000 watch streams took it from 27 to 65 MB, and it stayed at 73 MB after they closed.
// A thread of its own looks every `interval` and trims the arenas when their free bytes
// pass `threshold_bytes`, which costs a few milliseconds only when there is much to give.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <mutex>
#include <thread>

#include "absl/time/time.h"

namespace stoke::server {

class FreeHeapReturner {
 public:
  struct Options {
    absl::Duration interval = absl::Seconds(5);
    size_t threshold_bytes = 8 << 20;
  };

  explicit FreeHeapReturner(Options options);
  FreeHeapReturner() : FreeHeapReturner(Options{}) {}
  ~FreeHeapReturner();
  FreeHeapReturner(const FreeHeapReturner&) = delete;
  FreeHeapReturner& operator=(const FreeHeapReturner&) = delete;

  // Trims the heap if its free bytes exceed `threshold_bytes`; true if it trimmed.
  static bool ReturnIfOver(size_t threshold_bytes);

 private:
  const Options options_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace stoke::server
