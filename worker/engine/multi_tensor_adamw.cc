#include "worker/engine/multi_tensor_adamw.h"

#include <ATen/ATen.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <tuple>
#include <type_traits>
#include <unordered_map>

#include "worker/ops/own_adamw.h"
#include "worker/ops/step_context.h"
#include "worker/runtime/torch_compat.h"

namespace stoke::worker {
namespace {

// LibTorch keys optimizer state by the parameter's TensorImpl: as its address printed to
// a string in 1.13, as the pointer itself in later versions. Matching the key keeps
// save/load working unchanged.
template <typename StateMap>
typename StateMap::key_type StateKey(const StateMap&, const torch::Tensor& p) {
  using Key = typename StateMap::key_type;
  if constexpr (std::is_same_v<Key, std::string>) {
    std::ostringstream out;
    out << static_cast<const void*>(p.unsafeGetTensorImpl());
    return out.str();
  } else {
    return static_cast<Key>(p.unsafeGetTensorImpl());
  }
}

// The fused kernel with the learning rate as a device tensor arrived in torch 2.2.
#define STOKE_FUSED_ADAMW (STOKE_TORCH_AT_LEAST(2, 2) && STOKE_WITH_CUDA)
constexpr bool kFusedAvailable = STOKE_FUSED_ADAMW;

}  // namespace

MultiTensorAdamW::MultiTensorAdamW(std::vector<torch::Tensor> parameters,
                                   torch::optim::AdamWOptions options, AdamWRoute route)
    : torch::optim::AdamW(std::move(parameters), std::move(options)), route_(route) {}

AdamWRoute MultiTensorAdamW::RouteFor(const torch::Device& device) const {
  switch (route_) {
    case AdamWRoute::kAuto:
    case AdamWRoute::kFused:
      return kFusedAvailable && device.is_cuda() ? AdamWRoute::kFused : AdamWRoute::kForeach;
    default:
      return route_;
  }
}

bool MultiTensorAdamW::Capturable(const torch::Device& device) const {
  return RouteFor(device) == AdamWRoute::kFused;
}

void MultiTensorAdamW::SetLearningRate(double lr) {
  for (auto& group : param_groups_) group.options().set_lr(lr);
  for (auto& [key, counters] : counters_) PushLearningRate(key.group, counters);
}

void MultiTensorAdamW::PushLearningRate(size_t group, DeviceCounters& counters) {
  const double lr = param_groups_[group].options().get_lr();
  if (counters.lr_pushed != lr) {
    counters.lr.fill_(lr);
    counters.lr_pushed = lr;
  }
}

MultiTensorAdamW::DeviceCounters& MultiTensorAdamW::CountersFor(size_t group,
                                                                const torch::Device& device,
                                                                int64_t steps_before) {
  auto [it, inserted] = counters_.try_emplace(CounterKey{group, DeviceKey(device)});
  DeviceCounters& c = it->second;
  if (inserted) {
    const auto f32 = torch::TensorOptions().dtype(torch::kFloat32).device(device);
    c.step = torch::full({}, static_cast<double>(steps_before), f32);
    c.lr = torch::empty({}, f32);  // PushLearningRate fills it below
  }
  // The rate is pushed here too, not only by SetLearningRate: a checkpoint's load or a
  // caller may have set options().lr() since.
  PushLearningRate(group, c);
  return c;
}

void MultiTensorAdamW::SyncHostState() {
  if (counters_.empty()) return;
  for (size_t g = 0; g < param_groups_.size(); ++g) {
    for (auto& p : param_groups_[g].params()) {
      auto found = state_.find(StateKey(state_, p));
      auto counters = counters_.find(CounterKey{g, DeviceKey(p.device())});
      if (found == state_.end() || counters == counters_.end()) continue;
      auto& state = static_cast<torch::optim::AdamWParamState&>(*found->second);
      state.step(static_cast<int64_t>(counters->second.step.item<float>()));
    }
  }
}

torch::Tensor MultiTensorAdamW::step(LossClosure closure) {
  torch::Tensor loss;
  if (closure) {
    at::AutoGradMode enable_grad(true);
    loss = closure();
  }
  StepInParts({}, nullptr);
  return loss;
}

void MultiTensorAdamW::StepInParts(const std::vector<std::vector<torch::Tensor>>& parts,
                                   const std::function<void(size_t)>& before_part) {
  size_t parts_begun = 0;
  auto begin_parts_through = [&](size_t last) {  // before_part once per part, in order
    while (before_part && parts_begun < parts.size() && parts_begun <= last) {
      before_part(parts_begun++);
    }
  };
  bool per_parameter = route_ == AdamWRoute::kPerParameter;
  for (auto& group : param_groups_) {
    // AMSGrad: not ours to batch.
    per_parameter |= static_cast<torch::optim::AdamWOptions&>(group.options()).amsgrad();
  }
  if (per_parameter) {  // LibTorch's loop over parameters cannot go part by part
    begin_parts_through(parts.size());
    torch::optim::AdamW::step();
    return;
  }
  torch::NoGradGuard no_grad;
  std::unordered_map<const void*, size_t> part_of;
  for (size_t k = 0; k < parts.size(); ++k) {
    for (const auto& p : parts[k]) part_of[p.unsafeGetTensorImpl()] = k;
  }
  struct Batch {
    std::vector<torch::Tensor> params, grads, exp_avgs, exp_avg_sqs;
    int64_t steps_before = 0;
  };
  // Foreach: parameters that have taken the same number of steps share their bias
  // correction (usually that is all of them). Fused: one batch per device, whose step
  // count lives on the device. Either way, split by part; parameters in none come last.
  struct BatchKey {
    size_t part;
    size_t group;
    int64_t step;  // the step this batch takes; -1 on the fused route
    DeviceKey device;
    bool operator<(const BatchKey& o) const {
      return std::tie(part, group, step, device) < std::tie(o.part, o.group, o.step, o.device);
    }
  };
  std::map<BatchKey, Batch> batches;
  for (size_t g = 0; g < param_groups_.size(); ++g) {
    for (auto& p : param_groups_[g].params()) {
      if (!p.grad().defined()) continue;
      TORCH_CHECK(!p.grad().is_sparse(), "AdamW does not take sparse gradients");
      auto key = StateKey(state_, p);
      auto found = state_.find(key);
      if (found == state_.end()) {
        auto state = std::make_unique<torch::optim::AdamWParamState>();
        state->step(0);
        state->exp_avg(torch::zeros_like(p, torch::MemoryFormat::Preserve));
        state->exp_avg_sq(torch::zeros_like(p, torch::MemoryFormat::Preserve));
        found = state_.emplace(key, std::move(state)).first;
      }
      auto& state = static_cast<torch::optim::AdamWParamState&>(*found->second);
      const bool fused = RouteFor(p.device()) == AdamWRoute::kFused;
      const auto in_part = part_of.find(p.unsafeGetTensorImpl());
      const size_t part = in_part == part_of.end() ? parts.size() : in_part->second;
      Batch& batch =
          batches[BatchKey{part, g, fused ? -1 : state.step() + 1, DeviceKey(p.device())}];
      if (batch.params.empty()) batch.steps_before = state.step();
      // Bookkeeping only on the fused route: the device count is the truth there
      // (SyncHostState), as replayed graphs and skipped fp16 steps pass the host by.
      state.step(state.step() + 1);
      batch.params.push_back(p);
      batch.grads.push_back(p.grad());
      batch.exp_avgs.push_back(state.exp_avg());
      batch.exp_avg_sqs.push_back(state.exp_avg_sq());
    }
  }
  std::vector<DeviceCounters*> counted;  // device step counts this step has advanced
  for (auto& [key, b] : batches) {
    const size_t g = key.group;
    const int64_t step = key.step;
    begin_parts_through(key.part);
    auto& options = static_cast<torch::optim::AdamWOptions&>(param_groups_[g].options());
    const double lr = options.lr();
    const double beta1 = std::get<0>(options.betas());
    const double beta2 = std::get<1>(options.betas());
    const torch::Device device = b.params.front().device();
    if (step < 0) {
#if STOKE_FUSED_ADAMW
      DeviceCounters& counters = CountersFor(g, device, b.steps_before);
      // The kernel reads each parameter's step count already incremented, as
      // torch.optim does; one device scalar serves the whole batch (and every part).
      if (std::find(counted.begin(), counted.end(), &counters) == counted.end()) {
        counters.step.add_(1);
        counted.push_back(&counters);
      }
      std::optional<torch::Tensor> found_inf;
      if (found_inf_.defined()) found_inf = found_inf_;
      // Stoke's kernel spreads a small model's update over the whole GPU (own_adamw.h),
      // and writes the 16-bit weight copies the next step multiplies with as it goes
      // (half_weights.h).
      if (OwnKernelsAllowed()) {
        StepContext* context = StepContext::Current();
        OwnAdamWTensors own{b.params, b.grads, b.exp_avgs, b.exp_avg_sqs, {}};
        if (context != nullptr) own.half_copies = context->half_weights().CopiesToWrite(b.params);
        if (TryOwnAdamWStep(own, counters.lr, counters.step, found_inf, beta1, beta2, options.eps(),
                            options.weight_decay())) {
          if (context != nullptr) context->half_weights().MarkWritten(b.params);
          continue;
        }
      }
      const std::vector<torch::Tensor> step_list(b.params.size(), counters.step);
      at::_fused_adamw_(b.params, b.grads, b.exp_avgs, b.exp_avg_sqs, /*max_exp_avg_sqs=*/{},
                        step_list, counters.lr, beta1, beta2, options.weight_decay(), options.eps(),
                        /*amsgrad=*/false, /*maximize=*/false,
                        /*grad_scale=*/std::nullopt, found_inf);
      continue;
#else
      (void)device;
      TORCH_CHECK(false, "fused AdamW is not available in this build");
#endif
    }
    // optim::AdamW's arithmetic, one multi-tensor call per operation.
    if (options.weight_decay() != 0) at::_foreach_mul_(b.params, 1 - lr * options.weight_decay());
    const double bias_correction1 = 1 - std::pow(beta1, static_cast<double>(step));
    const double bias_correction2 = 1 - std::pow(beta2, static_cast<double>(step));
    at::_foreach_mul_(b.exp_avgs, beta1);
    at::_foreach_add_(b.exp_avgs, b.grads, 1 - beta1);
    at::_foreach_mul_(b.exp_avg_sqs, beta2);
    at::_foreach_addcmul_(b.exp_avg_sqs, b.grads, b.grads, 1 - beta2);
    std::vector<torch::Tensor> denom = at::_foreach_sqrt(b.exp_avg_sqs);
    at::_foreach_div_(denom, std::sqrt(bias_correction2));
    at::_foreach_add_(denom, options.eps());
    at::_foreach_addcdiv_(b.params, b.exp_avgs, denom, -lr / bias_correction1);
  }
  begin_parts_through(parts.size());  // parts with no gradients are still begun
  // A skipped fp16 step is not counted.
  if (found_inf_.defined()) {
    for (DeviceCounters* counters : counted) counters->step.sub_(found_inf_.squeeze(0));
  }
}

}  // namespace stoke::worker
