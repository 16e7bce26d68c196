#include "server/core/free_heap_returner.h"

#include <malloc.h>

namespace stoke::server {

FreeHeapReturner::FreeHeapReturner(Options options)
    : options_(options), thread_([this] {
        std::unique_lock<std::mutex> lock(mu_);
        while (!cv_.wait_for(lock, absl::ToChronoMilliseconds(options_.interval),
                             [this] { return stopping_; })) {
          lock.unlock();
          ReturnIfOver(options_.threshold_bytes);
          lock.lock();
        }
      }) {}

FreeHeapReturner::~FreeHeapReturner() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

bool FreeHeapReturner::ReturnIfOver(size_t threshold_bytes) {
  // fordblks: bytes in free chunks, over every arena.
  if (mallinfo2().fordblks <= threshold_bytes) return false;
  malloc_trim(0);
  return true;
}

}  // namespace stoke::server
