// Streams each caller may hold open at once (WatchJob): one caller's thousands of watches
// would take the memory and threads every other caller needs. A stream holds a Lease
// for as long as it lives; the lease gives its place back when the stream is gone. The
// quota must outlive its leases (the service that owns it outlives the server's streams).
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

namespace stoke::server {

class StreamQuota {
 public:
  class Lease {
   public:
    ~Lease();
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;

   private:
    friend class StreamQuota;
    Lease(StreamQuota* quota, std::string caller) : quota_(quota), caller_(std::move(caller)) {}
    StreamQuota* quota_;
    std::string caller_;
  };

  explicit StreamQuota(size_t per_caller) : per_caller_(per_caller) {}

  // A place for one more stream of `caller`; null when it holds per_caller already.
  std::unique_ptr<Lease> Acquire(const std::string& caller);
  size_t per_caller() const { return per_caller_; }
  void set_per_caller(size_t n);

 private:
  void Release(const std::string& caller);

  size_t per_caller_;
  std::mutex mu_;
  std::map<std::string, size_t> open_;
};

}  // namespace stoke::server
