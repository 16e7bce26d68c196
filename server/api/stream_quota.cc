#include "server/api/stream_quota.h"

namespace stoke::server {

StreamQuota::Lease::~Lease() { quota_->Release(caller_); }

std::unique_ptr<StreamQuota::Lease> StreamQuota::Acquire(const std::string& caller) {
  const std::lock_guard<std::mutex> lock(mu_);
  size_t& open = open_[caller];
  if (open >= per_caller_) return nullptr;
  ++open;
  return std::unique_ptr<Lease>(new Lease(this, caller));
}

void StreamQuota::set_per_caller(size_t n) {
  const std::lock_guard<std::mutex> lock(mu_);
  per_caller_ = n;
}

void StreamQuota::Release(const std::string& caller) {
  const std::lock_guard<std::mutex> lock(mu_);
  auto it = open_.find(caller);
  if (it == open_.end()) return;
  if (--it->second == 0) open_.erase(it);
}

}  // namespace stoke::server
