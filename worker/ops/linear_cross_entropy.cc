#include "worker/ops/linear_cross_entropy.h"

#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/torch.h>

#include "worker/ops/fused_cross_entropy.h"
#include "worker/ops/step_context.h"
#include "worker/runtime/torch_compat.h"

namespace stoke::worker {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

class LinearCrossEntropyFunction : public torch::autograd::Function<LinearCrossEntropyFunction> {
 public:
  static torch::Tensor forward(  // NOLINT(readability-identifier-naming)
      AutogradContext* ctx, const torch::Tensor& hidden, const torch::Tensor& weight,
      const torch::Tensor& targets, int64_t compute_dtype) {
    // The casts autocast would make, made here once; the loss stays in fp32.
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    const auto type = static_cast<at::ScalarType>(compute_dtype);
    const torch::Tensor h = hidden.to(type).contiguous();
    const torch::Tensor w = StepHalfCopy(StepContext::Current(), weight, type);
    const torch::Tensor logits = torch::mm(h, w.t());
    const torch::Tensor index = targets.to(torch::kLong).contiguous();
    const auto f32 = h.options().dtype(torch::kFloat32);
    torch::Tensor row_loss = torch::empty({h.size(0)}, f32);
    torch::Tensor row_lse = torch::empty({h.size(0)}, f32);
    FusedCrossEntropyRows(logits, index, row_loss, row_lse);
    ctx->save_for_backward({h, w, logits, index, row_lse});
    ctx->saved_data["hidden_type"] = static_cast<int64_t>(hidden.scalar_type());
    ctx->saved_data["weight_type"] = static_cast<int64_t>(weight.scalar_type());
    return row_loss.mean();
  }

  static variable_list backward(  // NOLINT(readability-identifier-naming)
      AutogradContext* ctx, const variable_list& grad_outputs) {
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    // The first backward overwrote the logits with their gradient; a second (a graph
    // retained) would read that as logits.
    TORCH_CHECK(ctx->saved_data.count("spent") == 0,
                "LinearCrossEntropy: its gradient can be taken once; the logits it kept are "
                "overwritten by the first backward");
    ctx->saved_data["spent"] = true;
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor& h = saved[0];
    const torch::Tensor& w = saved[1];
    torch::Tensor grad = saved[2];  // the logits, until the next line
    const int64_t rows = h.size(0);
    // The incoming gradient stays on the device (1, or the fp16 loss scale): no host read.
    FusedCrossEntropyGradInto(grad, saved[3], saved[4], grad_outputs[0],
                              1.0 / static_cast<double>(rows), grad);
    auto type_of = [&](const char* key) {
      return static_cast<at::ScalarType>(ctx->saved_data[key].toInt());
    };
    torch::Tensor dhidden;
    torch::Tensor dweight;
    if (ctx->needs_input_grad(0)) dhidden = grad.mm(w).to(type_of("hidden_type"));
    if (ctx->needs_input_grad(1)) {
      dweight = torch::empty(w.sizes(), w.options().dtype(type_of("weight_type")));
      compat::MatmulInto(dweight, grad.t(), h);
    }
    return {dhidden, dweight, torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

bool LinearCrossEntropyApplies(const torch::Device& device, at::ScalarType compute_dtype) {
#if STOKE_WITH_CUDA_KERNELS
  return OwnKernelsAllowed() && device.is_cuda() && torch::GradMode::is_enabled() &&
         (compute_dtype == torch::kBFloat16 || compute_dtype == torch::kHalf);
#else
  (void)device;
  (void)compute_dtype;
  return false;
#endif
}

torch::Tensor LinearCrossEntropy(const torch::Tensor& hidden, const torch::Tensor& weight,
                                 const torch::Tensor& targets, at::ScalarType compute_dtype) {
  TORCH_CHECK(hidden.dim() == 2 && weight.dim() == 2 && targets.dim() == 1 &&
                  hidden.size(1) == weight.size(1) && targets.size(0) == hidden.size(0),
              "LinearCrossEntropy: expected hidden [N, W], weight [V, W] and targets [N], got ",
              hidden.sizes(), ", ", weight.sizes(), " and ", targets.sizes());
  TORCH_CHECK(LinearCrossEntropyApplies(hidden.device(), compute_dtype),
              "LinearCrossEntropy: needs Stoke's CUDA kernels, a CUDA device, bf16 or fp16 and "
              "gradients being recorded (LinearCrossEntropyApplies)");
  return LinearCrossEntropyFunction::apply(hidden, weight, targets,
                                           static_cast<int64_t>(compute_dtype));
}

}  // namespace stoke::worker
