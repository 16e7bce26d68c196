// Where the next backward may write a parameter's gradient directly. A gradient reducer
// keeps every gradient in a bucket; a layer that computes a weight's gradient itself
// (AutocastLinear) can write it straight into the weight's slice of that bucket, instead
// of into a fresh tensor that is then copied there (one pass over the gradient saved, per
// weight and step).
//
// An offer holds for one backward and is taken at most once: the first product that
// computes the gradient writes into the destination, and autograd sums any further
// contribution (a weight used twice) as usual. The gradient written there is the
// product's alone, unscaled; the reducer checks whether what autograd finally stored as
// .grad is the destination itself, and copies it there if not.
//
// The table belongs to a training run's StepContext (step_context.h): the reducer offers
// into its run's table, and a layer takes from the table of the context it ran under in
// forward, so layers and the reducer meet without knowing of each other and two runs
// cannot mix.
#pragma once

#include <torch/types.h>

#include <mutex>
#include <unordered_map>

namespace stoke::worker {

class GradientDestinations {
 public:
  // `destination` (same sizes and strides as `parameter`, float32) is where the gradient
  // of `parameter` may go in the next backward.
  void Offer(const torch::Tensor& parameter, torch::Tensor destination);
  // The destination offered for the parameter with this identity
  // (Tensor::unsafeGetTensorImpl), removed from the table; undefined if none.
  torch::Tensor Take(const void* parameter);
  // Removes the parameter's offer, if any is left.
  void Withdraw(const torch::Tensor& parameter);

 private:
  std::mutex mutex_;
  std::unordered_map<const void*, torch::Tensor> offers_;
};

}  // namespace stoke::worker
