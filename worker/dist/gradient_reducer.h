// What DistributedDataParallel does to gradients, over our Communicator: parameters are
// grouped into buckets (the first and the last small, the rest about 25 MB), at first in
// reverse order of registration, roughly the order backward produces their gradients, and
// from the second reduced step on in the order the first one did produce them (rank 0's,
// for every rank), so that a model registering its layers out of order (ResNet's blocks
// list their convolutions, then their norms) still fills each bucket early.
// A hook on each parameter copies its gradient into its bucket as backward produces it;
// a bucket whose gradients are all in is all-reduced (summed) at once, in bucket order
// (every rank must issue collectives in the same order), while backward goes on with
// earlier layers. The hook runs after autograd has stored the gradient (on the
// parameter's AccumulateGrad node, where DDP's runs too) and then points .grad at its
// slice, so the bucket is the only copy kept. Layers that compute a weight's gradient
// themselves write it into the slice directly: the reducer offers the slices in the
// GradientDestinations of the run's step context (step_context.h), where the layers that
// ran under that context look. No copy then.
//
// The reduction sums: the caller makes it the mean by dividing the loss by the world
// size before backward (StepRunner does), which costs one scalar operation instead of a
// pass over every gradient, and keeps bf16/fp16 sums in range. After backward, Finish waits
// for the reductions; or LaunchRest and WaitForBucket let the optimizer update each
// bucket's parameters as soon as that bucket is reduced (MultiTensorAdamW::StepInParts),
// so the last reductions (the first layers, the embedding among them) overlap the update.
//
// Only the last micro-step of an accumulated step is reduced (Arm before its backward);
// earlier micro-steps accumulate locally in .grad as usual, and the hook copies that sum.
// Parameters that got no gradient this step (unused in the forward) are filled with
// what they have (or zeros) at Finish, so every rank still reduces every bucket.
#pragma once

#include <torch/types.h>

#include <cstdint>

#include <memory>
#include <vector>

#include "worker/dist/communicator.h"
#include "worker/ops/gradient_destinations.h"

namespace torch::autograd {
struct Node;
}

namespace stoke::worker {

class DeviceTimer;

class GradientReducer {
 public:
  // destinations: where this run's layers look for a place to write a weight's gradient
  // (its StepContext's); it must outlive the reducer.
  GradientReducer(std::vector<torch::Tensor> parameters, Communicator& communicator,
                  GradientDestinations& destinations, int64_t bucket_bytes,
                  int64_t first_bucket_bytes);
  ~GradientReducer();
  GradientReducer(const GradientReducer&) = delete;
  GradientReducer& operator=(const GradientReducer&) = delete;

  // The next backward completes an optimizer step: reduce its gradients as they come.
  void Arm();
  // After that backward: launches what is left and points each parameter's .grad at its
  // bucket slice, which holds the sum over all ranks once WaitForBucket has been called
  // for its bucket (work queued on the device after that call sees the reduced values).
  void LaunchRest();
  void WaitForBucket(size_t bucket);
  // LaunchRest, then WaitForBucket for every bucket.
  void Finish();
  // Each bucket's parameters, in launch order.
  const std::vector<std::vector<torch::Tensor>>& BucketParameters() const {
    return bucket_parameters_;
  }
  // Device seconds spent waiting in Finish for reductions backward had not hidden, since
  // the last call (only marks the device has passed are counted; never blocks).
  double TakeExposedSeconds();

  size_t bucket_count() const { return buckets_.size(); }
  int64_t world_size() const { return communicator_.world_size(); }

 private:
  struct Slot {
    size_t bucket = 0;
    int64_t offset = 0;  // elements into the bucket
    bool ready = false;
  };
  struct Bucket {
    torch::Tensor flat;
    size_t waiting = 0;  // gradients not yet in
    std::unique_ptr<PendingCollective> reduction;
  };

  int64_t BytesOf(size_t parameter) const;
  // Buckets of the parameters in `order` (indices), in that order: the first and the
  // last small, the rest about bucket_bytes_, one kind (type, device) each.
  void LayOut(const std::vector<size_t>& order);
  // LayOut in the order the first reduced backward delivered gradients, rank 0's.
  void LayOutInObservedOrder();
  torch::Tensor SlotView(size_t parameter) const;
  // The offer still standing for the parameter (removing it), else a new SlotView.
  torch::Tensor TakeOfferOrSlotView(size_t parameter) const;
  // Called once autograd has stored the parameter's gradient in .grad.
  void OnGradient(size_t parameter);
  void LaunchReadyBuckets();
  void Launch(Bucket& bucket);

  std::vector<torch::Tensor> parameters_;
  Communicator& communicator_;
  GradientDestinations& destinations_;
  int64_t bucket_bytes_;
  int64_t first_bucket_bytes_;
  std::vector<Slot> slots_;
  std::vector<size_t> ready_order_;  // parameters as the first reduced backward gave them
  bool laid_out_in_observed_order_ = false;
  std::vector<Bucket> buckets_;
  std::vector<std::vector<torch::Tensor>> bucket_parameters_;  // per bucket, as buckets_
  struct GradientHook {
    std::shared_ptr<torch::autograd::Node> accumulator;  // the parameter's AccumulateGrad
    uintptr_t key = 0;
  };
  std::vector<GradientHook> gradient_hooks_;
  bool armed_ = false;
  size_t next_launch_ = 0;
  struct ExposedWait {
    std::unique_ptr<DeviceTimer> begin;
    std::unique_ptr<DeviceTimer> end;
  };
  std::vector<ExposedWait> exposed_;
};

}  // namespace stoke::worker
