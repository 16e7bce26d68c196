#include "worker/ops/gradient_destinations.h"

#include <utility>

namespace stoke::worker {

void GradientDestinations::Offer(const torch::Tensor& parameter, torch::Tensor destination) {
  std::lock_guard<std::mutex> lock(mutex_);
  offers_[parameter.unsafeGetTensorImpl()] = std::move(destination);
}

torch::Tensor GradientDestinations::Take(const void* parameter) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = offers_.find(parameter);
  if (it == offers_.end()) return {};
  // Moved out: the taker's reference is then the only one, and autograd can keep the
  // tensor as .grad without copying it (it copies a gradient something else holds).
  torch::Tensor destination = std::move(it->second);
  offers_.erase(it);
  return destination;
}

void GradientDestinations::Withdraw(const torch::Tensor& parameter) {
  std::lock_guard<std::mutex> lock(mutex_);
  offers_.erase(parameter.unsafeGetTensorImpl());
}

}  // namespace stoke::worker
