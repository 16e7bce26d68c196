#include "worker/dist/gradient_reducer.h"

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/torch.h>

#include <functional>
#include <stdexcept>

#include "worker/ops/gradient_destinations.h"
#include "worker/runtime/device_timer.h"

namespace stoke::worker {
namespace {

// Runs a callback after an AccumulateGrad node has stored a gradient.
class StoredGradientHook final : public torch::autograd::FunctionPostHook {
 public:
  explicit StoredGradientHook(std::function<void()> on_stored) : on_stored_(std::move(on_stored)) {}
  torch::autograd::variable_list operator()(
      const torch::autograd::variable_list& outputs,
      const torch::autograd::variable_list& /*inputs*/) override {
    on_stored_();
    return outputs;
  }

 private:
  std::function<void()> on_stored_;
};

// Whether `grad` is `view` (the same elements, laid out alike), as when a layer wrote
// the gradient into the slice offered to it and autograd kept that tensor.
bool IsView(const torch::Tensor& grad, const torch::Tensor& view) {
  return grad.defined() && grad.data_ptr() == view.data_ptr() && grad.sizes() == view.sizes() &&
         grad.strides() == view.strides() && grad.scalar_type() == view.scalar_type();
}

}  // namespace

GradientReducer::GradientReducer(std::vector<torch::Tensor> parameters, Communicator& communicator,
                                 GradientDestinations& destinations, int64_t bucket_bytes,
                                 int64_t first_bucket_bytes)
    : parameters_(std::move(parameters)),
      communicator_(communicator),
      destinations_(destinations),
      bucket_bytes_(bucket_bytes),
      first_bucket_bytes_(first_bucket_bytes) {
  slots_.resize(parameters_.size());
  // Until a backward has shown the order: reverse registration order, as the output
  // layers' gradients come first in backward.
  std::vector<size_t> order;
  for (size_t i = parameters_.size(); i-- > 0;) {
    if (parameters_[i].requires_grad()) order.push_back(i);
  }
  LayOut(order);
  for (size_t i = 0; i < parameters_.size(); ++i) {
    if (!parameters_[i].requires_grad()) continue;
    // After autograd has stored the gradient in .grad, where PyTorch's DDP hooks in: with
    // a hook on the tensor itself (register_hook), which runs before, the GPU traces
    // showed one device copy per parameter and step more. The node is kept alive here:
    // a parameter only holds it weakly, and a new one would come without the hook. The
    // hook captures an index, not the parameter, so that neither keeps the other alive.
    std::shared_ptr<torch::autograd::Node> accumulator =
        torch::autograd::impl::grad_accumulator(parameters_[i]);
    const uintptr_t key = accumulator->add_post_hook(
        std::make_unique<StoredGradientHook>([this, i] { OnGradient(i); }));
    gradient_hooks_.push_back({std::move(accumulator), key});
  }
}

GradientReducer::~GradientReducer() {
  for (auto& hook : gradient_hooks_) hook.accumulator->del_post_hook(hook.key);
  for (const auto& p : parameters_) destinations_.Withdraw(p);
}

int64_t GradientReducer::BytesOf(size_t parameter) const {
  const torch::Tensor& p = parameters_[parameter];
  return p.numel() * static_cast<int64_t>(p.element_size());
}

void GradientReducer::LayOut(const std::vector<size_t>& order) {
  std::vector<std::vector<size_t>> groups;
  int64_t group_bytes = 0;
  for (size_t i : order) {
    const torch::Tensor& p = parameters_[i];
    // The first bucket (index 0) is the small one.
    const int64_t limit = groups.size() == 1 ? first_bucket_bytes_ : bucket_bytes_;
    const bool same_kind = !groups.empty() &&
                           parameters_[groups.back().front()].scalar_type() == p.scalar_type() &&
                           parameters_[groups.back().front()].device() == p.device();
    if (!same_kind || group_bytes >= limit) {
      groups.emplace_back();
      group_bytes = 0;
    }
    groups.back().push_back(i);
    group_bytes += BytesOf(i);
  }
  // The last bucket waits for backward's very last gradients (the first layers), and
  // nothing but the update can hide its reduction: keep it small too, so that the
  // parameters before those are reduced while backward is still running. It keeps at
  // least one parameter (GPT's embedding alone is larger than any bucket).
  int64_t last_bytes = 0;
  if (!groups.empty()) {
    for (size_t i : groups.back()) last_bytes += BytesOf(i);
  }
  if (!groups.empty() && groups.back().size() > 1 && last_bytes > first_bucket_bytes_) {
    std::vector<size_t>& last = groups.back();
    size_t keep = last.size();
    int64_t tail_bytes = 0;
    while (keep > 1) {
      const int64_t bytes = BytesOf(last[keep - 1]);
      if (keep < last.size() && tail_bytes + bytes > first_bucket_bytes_) break;
      tail_bytes += bytes;
      --keep;
    }
    std::vector<size_t> tail(last.begin() + static_cast<std::ptrdiff_t>(keep), last.end());
    last.resize(keep);
    groups.push_back(std::move(tail));
  }
  buckets_.clear();
  bucket_parameters_.clear();
  for (const auto& group : groups) {
    Bucket& bucket = buckets_.emplace_back();
    int64_t elements = 0;
    for (size_t i : group) {
      slots_[i].bucket = buckets_.size() - 1;
      slots_[i].offset = elements;
      elements += parameters_[i].numel();
    }
    bucket.flat =
        torch::zeros({elements}, parameters_[group.front()].options().requires_grad(false));
    auto& tensors = bucket_parameters_.emplace_back();
    for (size_t i : group) tensors.push_back(parameters_[i]);
  }
}

void GradientReducer::LayOutInObservedOrder() {
  // Rank 0's order for every rank: collectives must match, and ranks whose autograd
  // ran branches in another order would otherwise bucket differently.
  const torch::Device device = buckets_.front().flat.device();
  std::vector<torch::Tensor> agreed = {
      torch::tensor(std::vector<int64_t>(ready_order_.begin(), ready_order_.end()),
                    torch::TensorOptions().dtype(torch::kInt64))
          .to(device)};
  communicator_.Broadcast(agreed, /*root=*/0, "the broadcast of rank 0's gradient bucket order");
  const torch::Tensor on_host = agreed[0].cpu();
  const int64_t* indices = on_host.data_ptr<int64_t>();
  LayOut(std::vector<size_t>(indices, indices + on_host.numel()));
}

torch::Tensor GradientReducer::SlotView(size_t parameter) const {
  const Slot& slot = slots_[parameter];
  const torch::Tensor& p = parameters_[parameter];
  torch::Tensor flat = buckets_[slot.bucket].flat.narrow(0, slot.offset, p.numel());
  // The gradient takes its parameter's layout (channels_last weights are dense but not
  // contiguous), so that the optimizer's elementwise kernels see matching strides.
  return p.is_contiguous() ? flat.view(p.sizes()) : flat.as_strided(p.sizes(), p.strides());
}

torch::Tensor GradientReducer::TakeOfferOrSlotView(size_t parameter) const {
  torch::Tensor offered = destinations_.Take(parameters_[parameter].unsafeGetTensorImpl());
  return offered.defined() ? offered : SlotView(parameter);
}

void GradientReducer::Arm() {
  if (armed_) throw std::logic_error("GradientReducer armed twice without Finish");
  // The first reduced backward recorded the order gradients come in; buckets follow it
  // from the second on (the first step's .grad slices are released by then), so that each
  // bucket is complete as early as backward allows, as PyTorch's DDP rebuilds its buckets.
  if (!laid_out_in_observed_order_ && !ready_order_.empty()) {
    LayOutInObservedOrder();
    laid_out_in_observed_order_ = true;
  }
  armed_ = true;
  next_launch_ = 0;
  for (auto& slot : slots_) slot.ready = false;
  // A parameter without a gradient yet may get it written straight into its slice. One
  // with earlier micro-steps' gradient in .grad has that added to it by autograd instead.
  for (size_t i = 0; i < parameters_.size(); ++i) {
    if (parameters_[i].requires_grad() && !parameters_[i].grad().defined()) {
      destinations_.Offer(parameters_[i], SlotView(i));
    }
  }
  for (size_t b = 0; b < buckets_.size(); ++b) {
    buckets_[b].waiting = bucket_parameters_[b].size();
    buckets_[b].reduction.reset();
  }
}

void GradientReducer::OnGradient(size_t parameter) {
  // An earlier micro-step: autograd accumulates into .grad.
  if (!armed_) return;
  Slot& slot = slots_[parameter];
  // Already in (a parameter reached twice is summed by autograd before it is stored).
  if (slot.ready) return;
  torch::NoGradGuard no_grad;
  // The slice, as offered if no layer took the offer: taking it here also withdraws it,
  // and an offer must not outlive this backward (a later, unreduced micro-step would
  // write into the bucket).
  torch::Tensor view = TakeOfferOrSlotView(parameter);
  // .grad holds this step's gradient, plus earlier micro-steps' when accumulating; or it
  // is the slice already, written there by the layer that computed it.
  torch::Tensor& grad = parameters_[parameter].mutable_grad();
  if (!IsView(grad, view)) {
    view.copy_(grad);
    // From here .grad is the slice, and autograd's own gradient is freed.
    grad = view;
  }
  slot.ready = true;
  if (!laid_out_in_observed_order_) ready_order_.push_back(parameter);
  if (--buckets_[slot.bucket].waiting == 0) LaunchReadyBuckets();
}

void GradientReducer::LaunchReadyBuckets() {
  while (next_launch_ < buckets_.size() && buckets_[next_launch_].waiting == 0) {
    Launch(buckets_[next_launch_++]);
  }
}

void GradientReducer::Launch(Bucket& bucket) {
  bucket.reduction = communicator_.AllReduceSum(bucket.flat);
}

void GradientReducer::LaunchRest() {
  if (!armed_) throw std::logic_error("GradientReducer::LaunchRest without Arm");
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < parameters_.size(); ++i) {
    Slot& slot = slots_[i];
    if (!parameters_[i].requires_grad() || slot.ready) continue;
    // No gradient this micro-step: reduce what earlier micro-steps left, or zeros.
    const torch::Tensor& earlier = parameters_[i].grad();
    torch::Tensor view = TakeOfferOrSlotView(i);
    if (earlier.defined()) {
      view.copy_(earlier);
    } else {
      view.zero_();
    }
    // The hook pointed the others' .grad at their slices already.
    parameters_[i].mutable_grad() = view;
    slot.ready = true;
    if (!laid_out_in_observed_order_) ready_order_.push_back(i);
    --buckets_[slot.bucket].waiting;
  }
  LaunchReadyBuckets();
  armed_ = false;
}

void GradientReducer::WaitForBucket(size_t index) {
  Bucket& bucket = buckets_.at(index);
  if (!bucket.reduction) return;  // waited for already
  // The device's idle time between these two marks is communication backward (and the
  // update of the buckets before) did not hide.
  const torch::Device device = bucket.flat.device();
  ExposedWait wait;
  wait.begin = DeviceTimer::Record(device);
  bucket.reduction->Wait();
  wait.end = DeviceTimer::Record(device);
  exposed_.push_back(std::move(wait));
  bucket.reduction.reset();
}

void GradientReducer::Finish() {
  LaunchRest();
  for (size_t b = 0; b < buckets_.size(); ++b) WaitForBucket(b);
}

double GradientReducer::TakeExposedSeconds() {
  double seconds = 0;
  size_t done = 0;
  while (done < exposed_.size() && exposed_[done].end->Ready()) {
    seconds += exposed_[done].end->SecondsSince(*exposed_[done].begin);
    ++done;
  }
  exposed_.erase(exposed_.begin(), exposed_.begin() + static_cast<std::ptrdiff_t>(done));
  return seconds;
}

}  // namespace stoke::worker
