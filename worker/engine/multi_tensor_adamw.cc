#include "worker/engine/multi_tensor_adamw.h"

#include <ATen/ATen.h>
#include <torch/torch.h>

#include <cmath>
#include <map>
#include <sstream>
#include <type_traits>

#include "worker/engine/torch_compat.h"

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

constexpr bool kFusedAvailable = STOKE_TORCH_AT_LEAST(2, 0) && STOKE_WITH_CUDA;

}  // namespace

MultiTensorAdamW::MultiTensorAdamW(std::vector<torch::Tensor> parameters,
                                   torch::optim::AdamWOptions options, AdamWRoute route)
    : torch::optim::AdamW(std::move(parameters), std::move(options)), route_(route) {}

AdamWRoute MultiTensorAdamW::RouteFor(const torch::Device& device) const {
  switch (route_) {
    case AdamWRoute::kAuto:
      // Foreach until the fused route has been checked against the reference on a GPU
      // (tests/gpu/trainer_gpu_test.cc); then auto should prefer fused.
      return AdamWRoute::kForeach;
    case AdamWRoute::kFused:
      return kFusedAvailable && device.is_cuda() ? AdamWRoute::kFused : AdamWRoute::kForeach;
    default:
      return route_;
  }
}

torch::Tensor MultiTensorAdamW::step(LossClosure closure) {
  if (route_ == AdamWRoute::kPerParameter) return torch::optim::AdamW::step(std::move(closure));
  for (auto& group : param_groups_) {
    if (static_cast<torch::optim::AdamWOptions&>(group.options()).amsgrad()) {
      return torch::optim::AdamW::step(std::move(closure));  // AMSGrad: not ours to batch
    }
  }
  torch::NoGradGuard no_grad;
  torch::Tensor loss;
  if (closure) {
    at::AutoGradMode enable_grad(true);
    loss = closure();
  }
  for (auto& group : param_groups_) {
    auto& options = static_cast<torch::optim::AdamWOptions&>(group.options());
    const double lr = options.lr();
    const double beta1 = std::get<0>(options.betas());
    const double beta2 = std::get<1>(options.betas());
    // Parameters that have taken the same number of steps share their bias correction;
    // usually that is all of them.
    struct Batch {
      std::vector<torch::Tensor> params, grads, exp_avgs, exp_avg_sqs;
    };
    std::map<std::pair<int64_t, std::string>, Batch> batches;  // (step, device)
    for (auto& p : group.params()) {
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
      state.step(state.step() + 1);
      Batch& batch = batches[{state.step(), p.device().str()}];
      batch.params.push_back(p);
      batch.grads.push_back(p.grad());
      batch.exp_avgs.push_back(state.exp_avg());
      batch.exp_avg_sqs.push_back(state.exp_avg_sq());
    }
    for (auto& [key, b] : batches) {
      const int64_t step = key.first;
      const torch::Device device = b.params.front().device();
      if (RouteFor(device) == AdamWRoute::kFused) {
#if STOKE_TORCH_AT_LEAST(2, 0) && STOKE_WITH_CUDA
        // The kernel reads each parameter's step count from the device, already
        // incremented (as torch.optim does); one scalar serves the whole batch.
        const torch::Tensor steps =
            torch::full({}, static_cast<double>(step),
                        torch::TensorOptions().dtype(torch::kFloat32).device(device));
        const std::vector<torch::Tensor> step_list(b.params.size(), steps);
        at::_fused_adamw_(b.params, b.grads, b.exp_avgs, b.exp_avg_sqs, /*max_exp_avg_sqs=*/{},
                          step_list, lr, beta1, beta2, options.weight_decay(), options.eps(),
                          /*amsgrad=*/false, /*maximize=*/false);
        continue;
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
  }
  return loss;
}

}  // namespace stoke::worker
