#include "worker/ops/softmax_cross_entropy.h"

#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/torch.h>

#include <limits>

#include "worker/ops/fused_cross_entropy.h"

namespace stoke::worker {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// fp32 probabilities. For fp16 on CUDA one kernel reads the logits and writes fp32; ATen
// has that kernel for no other case (not bf16, not CPUs), which cast first. The cast is
// freed at once: only the probabilities are kept for backward.
torch::Tensor Probabilities(const torch::Tensor& logits) {
  if (logits.is_cuda() && logits.scalar_type() == torch::kHalf) {
    return at::_softmax(logits, 1, /*half_to_float=*/true);
  }
  return at::_softmax(logits.to(torch::kFloat32), 1, /*half_to_float=*/false);
}

class SoftmaxCrossEntropyFunction : public torch::autograd::Function<SoftmaxCrossEntropyFunction> {
 public:
  static torch::Tensor forward(  // NOLINT(readability-identifier-naming)
      AutogradContext* ctx, const torch::Tensor& logits, const torch::Tensor& targets) {
    // Autocast would reroute softmax through an fp32 copy of the logits: the cast this
    // function exists to avoid.
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    const torch::Tensor probabilities = Probabilities(logits);
    const torch::Tensor index = targets.reshape({-1, 1});
    const torch::Tensor picked = probabilities.gather(1, index).reshape({-1});
    // A target probability that underflows fp32 would make the loss infinite; its loss is
    // capped at -log(smallest normal float) = 87.3 instead.
    const torch::Tensor loss =
        picked.clamp_min(std::numeric_limits<float>::min()).log().mean().neg();
    ctx->save_for_backward({probabilities, index, picked});
    ctx->saved_data["dtype"] = static_cast<int64_t>(logits.scalar_type());
    return loss;
  }

  static variable_list backward(  // NOLINT(readability-identifier-naming)
      AutogradContext* ctx, const variable_list& grad_outputs) {
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor& probabilities = saved[0];
    const torch::Tensor& index = saved[1];
    const torch::Tensor& picked = saved[2];
    const auto dtype = static_cast<at::ScalarType>(ctx->saved_data["dtype"].toInt());
    // d(mean loss)/d(logits) = (softmax - one_hot) * grad / N. The scale stays a device
    // scalar: no host read.
    const torch::Tensor scale =
        grad_outputs[0].to(torch::kFloat32) / static_cast<double>(probabilities.size(0));
    torch::Tensor grad = torch::empty(probabilities.sizes(), probabilities.options().dtype(dtype));
    at::mul_out(grad, probabilities, scale);  // fp32 arithmetic, written once in `dtype`
    // p - 1 in fp32 before rounding: a confident target (p near 1) keeps its small gradient.
    grad.scatter_(1, index, ((picked - 1.0) * scale).to(dtype).reshape({-1, 1}));
    return {grad, torch::Tensor()};
  }
};

// The same loss through Stoke's own kernels (fused_cross_entropy.h): the logits are read
// once forward and once backward, and only their per-row log-sum-exp is kept besides them.
class FusedSoftmaxCrossEntropyFunction
    : public torch::autograd::Function<FusedSoftmaxCrossEntropyFunction> {
 public:
  static torch::Tensor forward(  // NOLINT(readability-identifier-naming)
      AutogradContext* ctx, const torch::Tensor& logits, const torch::Tensor& targets) {
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    const torch::Tensor rows = logits.contiguous();
    const torch::Tensor index = targets.to(torch::kLong).contiguous();
    const auto options = rows.options().dtype(torch::kFloat32);
    torch::Tensor row_loss = torch::empty({rows.size(0)}, options);
    torch::Tensor row_lse = torch::empty({rows.size(0)}, options);
    FusedCrossEntropyRows(rows, index, row_loss, row_lse);
    ctx->save_for_backward({rows, index, row_lse});
    return row_loss.mean();
  }

  static variable_list backward(  // NOLINT(readability-identifier-naming)
      AutogradContext* ctx, const variable_list& grad_outputs) {
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    const auto saved = ctx->get_saved_variables();
    // The incoming gradient stays on the device (1, or the fp16 loss scale): no host read.
    return {FusedCrossEntropyGrad(saved[0], saved[1], saved[2], grad_outputs[0],
                                  1.0 / static_cast<double>(saved[0].size(0))),
            torch::Tensor()};
  }
};

}  // namespace

torch::Tensor SoftmaxCrossEntropy(const torch::Tensor& logits, const torch::Tensor& targets) {
  TORCH_CHECK(logits.dim() == 2 && targets.dim() == 1 && logits.size(0) == targets.size(0),
              "SoftmaxCrossEntropy: expected logits [N, C] and targets [N], got ", logits.sizes(),
              " and ", targets.sizes());
  if (FusedCrossEntropyApplies(logits)) {
    return FusedSoftmaxCrossEntropyFunction::apply(logits, targets);
  }
  return SoftmaxCrossEntropyFunction::apply(logits, targets);
}

}  // namespace stoke::worker
