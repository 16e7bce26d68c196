#include "worker/ops/half_linear.h"

#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/torch.h>

#include <optional>
#include <tuple>
#include <utility>
#include <vector>

#include "worker/ops/step_context.h"
#include "worker/runtime/torch_compat.h"

#if STOKE_WITH_CUDA_KERNELS
#include <c10/cuda/CUDAGuard.h>

#include "worker/ops/cuda/column_sum_kernels.h"
#include "worker/ops/own_kernel_call.h"
#endif

namespace stoke::worker {
namespace {

// What follows the matrix product inside the function.
enum class Activation : int64_t { kNone = 0, kGelu = 1, kRelu = 2 };

#if STOKE_WITH_CUDA_KERNELS

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// dy^T @ rows in the weight's type, written by the matrix product itself where the
// version allows (compat::MatmulInto), into the place the forward pass's step context
// keeps for this weight's gradient if its gradient reducer offered one
// (gradient_destinations.h).
torch::Tensor WeightGradient(StepContext* context, const torch::Tensor& dy,
                             const torch::Tensor& rows, at::ScalarType weight_type,
                             int64_t weight_key) {
  torch::Tensor dweight;
  if (context != nullptr) {
    // NOLINTNEXTLINE(performance-no-int-to-ptr): the key is only compared, never dereferenced
    dweight = context->gradient_destinations().Take(reinterpret_cast<const void*>(weight_key));
  }
  if (!dweight.defined()) {
    dweight = torch::empty({dy.size(1), rows.size(1)}, rows.options().dtype(weight_type));
  }
  compat::MatmulInto(dweight, dy.t(), rows);
  return dweight;
}

// For dy [rows, width] (bf16/fp16, contiguous), the gradient of the matrix product's
// output and its column sums in fp32 (the bias gradient), in one pass: dy itself, or
// through the activation, given what forward saved of it (same shape and type): the
// GELU's input, or the ReLU's output.
std::pair<torch::Tensor, torch::Tensor> ProductAndBiasGradients(const torch::Tensor& dy,
                                                                Activation activation,
                                                                const torch::Tensor& saved) {
  const int64_t n = dy.size(0);
  const int64_t width = dy.size(1);
  const auto f32 = dy.options().dtype(torch::kFloat32);
  torch::Tensor dbias = torch::empty({width}, f32);
  torch::Tensor partials = torch::empty({cuda::ColumnSumScratch(n, width)}, f32);
  const cuda::HalfType type = HalfTypeOf(dy.scalar_type(), "AutocastLinear");
  void* const stream = CurrentStreamOf(dy);
  if (activation == Activation::kNone) {
    CheckKernel(cuda::ColumnSums(dy.data_ptr(), type, n, width, dbias.data_ptr<float>(),
                                 partials.data_ptr<float>(), stream),
                "column-sum");
    return {dy, std::move(dbias)};
  }
  torch::Tensor dpre = torch::empty_like(dy);
  const bool gelu = activation == Activation::kGelu;
  const auto activation_backward =
      gelu ? cuda::GeluBackwardColumnSums : cuda::ReluBackwardColumnSums;
  CheckKernel(activation_backward(dy.data_ptr(), saved.data_ptr(), type, n, width, dpre.data_ptr(),
                                  dbias.data_ptr<float>(), partials.data_ptr<float>(), stream),
              gelu ? "GELU backward and column-sum" : "ReLU backward and column-sum");
  return {std::move(dpre), std::move(dbias)};
}

class HalfLinearFunction : public torch::autograd::Function<HalfLinearFunction> {
 public:
  static torch::Tensor forward(  // NOLINT(readability-identifier-naming)
      AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& weight,
      const torch::Tensor& bias, int64_t half_type, int64_t activation) {
    // The casts autocast would make, made here once, and nothing cast again inside.
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    const auto type = static_cast<at::ScalarType>(half_type);
    const int64_t in = weight.size(1);
    const torch::Tensor rows = x.to(type).reshape({-1, in});
    StepContext* const context = StepContext::Current();
    const torch::Tensor w = StepHalfCopy(context, weight, type);
    const auto act = static_cast<Activation>(activation);
    torch::Tensor out;
    if (act == Activation::kRelu) {
      // Bias and ReLU in the matrix product's epilogue (cuBLASLt's where ATen can use it).
      // Backward needs only the output: x > 0 exactly where relu(x) > 0.
      out = at::_addmm_activation(StepHalfCopy(context, bias, type), rows, w.t(), 1, 1,
                                  /*use_gelu=*/false);
      ctx->save_for_backward({rows, w, out});
    } else {
      out = torch::addmm(StepHalfCopy(context, bias, type), rows, w.t());
      // With a GELU, backward needs its input (saved in place of the output autograd
      // would have kept for ATen's gelu backward) and the output is the GELU's. ATen's
      // GELU epilogue is not used: it computes the tanh approximation, and returns no
      // input for backward.
      ctx->save_for_backward({rows, w, act == Activation::kGelu ? out : torch::Tensor()});
      if (act == Activation::kGelu) out = torch::gelu(out);
    }
    ctx->saved_data["activation"] = activation;
    ctx->saved_data["x_sizes"] = x.sizes().vec();
    ctx->saved_data["x_type"] = static_cast<int64_t>(x.scalar_type());
    ctx->saved_data["weight_type"] = static_cast<int64_t>(weight.scalar_type());
    // The weight's identity, not the weight: backward asks the context's
    // GradientDestinations with it. Backward may run on another thread, with no scope
    // installed: it finds the context here (the training run that owns it outlives every
    // backward of its steps).
    ctx->saved_data["weight_key"] = reinterpret_cast<int64_t>(weight.unsafeGetTensorImpl());
    ctx->saved_data["step_context"] = reinterpret_cast<int64_t>(context);
    ctx->saved_data["bias_type"] = static_cast<int64_t>(bias.scalar_type());
    std::vector<int64_t> sizes = x.sizes().vec();
    sizes.back() = weight.size(0);
    return out.view(sizes);
  }

  static variable_list backward(  // NOLINT(readability-identifier-naming)
      AutogradContext* ctx, const variable_list& grad_outputs) {
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor& rows = saved[0];
    const torch::Tensor& w = saved[1];
    const c10::cuda::CUDAGuard device(rows.device());
    auto type_of = [&](const char* key) {
      return static_cast<at::ScalarType>(ctx->saved_data[key].toInt());
    };
    torch::Tensor dy = grad_outputs[0].to(rows.scalar_type()).reshape({-1, w.size(0)});
    const auto activation = static_cast<Activation>(ctx->saved_data["activation"].toInt());
    torch::Tensor dbias;
    // With an activation, its backward comes first (its input's gradient is the product's
    // output gradient), and the bias gradient is summed in the same pass.
    if (activation != Activation::kNone || ctx->needs_input_grad(2)) {
      std::tie(dy, dbias) = ProductAndBiasGradients(dy.contiguous(), activation, saved[2]);
    }
    torch::Tensor dx;
    torch::Tensor dweight;
    if (ctx->needs_input_grad(0)) {
      dx = dy.mm(w).view(ctx->saved_data["x_sizes"].toIntVector()).to(type_of("x_type"));
    }
    if (ctx->needs_input_grad(1)) {
      // NOLINTNEXTLINE(performance-no-int-to-ptr): the pointer forward saved
      auto* context = reinterpret_cast<StepContext*>(ctx->saved_data["step_context"].toInt());
      dweight = WeightGradient(context, dy, rows, type_of("weight_type"),
                               ctx->saved_data["weight_key"].toInt());
    }
    if (ctx->needs_input_grad(2)) dbias = dbias.to(type_of("bias_type"));
    return {dx, dweight, dbias, torch::Tensor(), torch::Tensor()};
  }
};

// A transformer's MLP, linear2(gelu(linear1(x))), as one function that keeps for backward
// the GELU's input but not its output: backward computes the GELU again, in one pointwise
// pass, for the second weight's gradient. Two separate layers would hold both, and at
// GPT-2 small's batch each is 100 MB a block (1.2 GB over 12 blocks) from forward to
// backward. torch.compile's partitioner makes the same trade.
class GeluMlpFunction : public torch::autograd::Function<GeluMlpFunction> {
 public:
  static torch::Tensor forward(  // NOLINT(readability-identifier-naming)
      AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& w1,
      const torch::Tensor& b1, const torch::Tensor& w2, const torch::Tensor& b2,
      int64_t half_type) {
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    const auto type = static_cast<at::ScalarType>(half_type);
    const torch::Tensor rows = x.to(type).reshape({-1, w1.size(1)});
    StepContext* const context = StepContext::Current();
    const torch::Tensor w1_half = StepHalfCopy(context, w1, type);
    const torch::Tensor w2_half = StepHalfCopy(context, w2, type);
    const torch::Tensor pre = torch::addmm(StepHalfCopy(context, b1, type), rows, w1_half.t());
    const torch::Tensor out =
        torch::addmm(StepHalfCopy(context, b2, type), torch::gelu(pre), w2_half.t());
    ctx->save_for_backward({rows, w1_half, pre, w2_half});
    ctx->saved_data["x_sizes"] = x.sizes().vec();
    ctx->saved_data["x_type"] = static_cast<int64_t>(x.scalar_type());
    ctx->saved_data["w1_type"] = static_cast<int64_t>(w1.scalar_type());
    ctx->saved_data["w2_type"] = static_cast<int64_t>(w2.scalar_type());
    ctx->saved_data["b1_type"] = static_cast<int64_t>(b1.scalar_type());
    ctx->saved_data["b2_type"] = static_cast<int64_t>(b2.scalar_type());
    // As HalfLinearFunction: the weights' identities and the context, for backward.
    ctx->saved_data["w1_key"] = reinterpret_cast<int64_t>(w1.unsafeGetTensorImpl());
    ctx->saved_data["w2_key"] = reinterpret_cast<int64_t>(w2.unsafeGetTensorImpl());
    ctx->saved_data["step_context"] = reinterpret_cast<int64_t>(context);
    std::vector<int64_t> sizes = x.sizes().vec();
    sizes.back() = w2.size(0);
    return out.view(sizes);
  }

  static variable_list backward(  // NOLINT(readability-identifier-naming)
      AutogradContext* ctx, const variable_list& grad_outputs) {
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor& rows = saved[0];
    const torch::Tensor& w1_half = saved[1];
    const torch::Tensor& pre = saved[2];
    const torch::Tensor& w2_half = saved[3];
    const c10::cuda::CUDAGuard device(rows.device());
    auto type_of = [&](const char* key) {
      return static_cast<at::ScalarType>(ctx->saved_data[key].toInt());
    };
    // NOLINTNEXTLINE(performance-no-int-to-ptr): the pointer forward saved
    auto* context = reinterpret_cast<StepContext*>(ctx->saved_data["step_context"].toInt());
    const torch::Tensor dy =
        grad_outputs[0].to(rows.scalar_type()).reshape({-1, w2_half.size(0)}).contiguous();
    torch::Tensor db2 = ProductAndBiasGradients(dy, Activation::kNone, torch::Tensor()).second;
    // Second layer first, the order two separate layers' gradients would come in (the
    // gradient reducer's buckets follow it).
    torch::Tensor dw2;
    if (ctx->needs_input_grad(3)) {
      dw2 = WeightGradient(context, dy, torch::gelu(pre), type_of("w2_type"),
                           ctx->saved_data["w2_key"].toInt());
    }
    auto [dpre, db1] = ProductAndBiasGradients(dy.mm(w2_half), Activation::kGelu, pre);
    torch::Tensor dw1;
    torch::Tensor dx;
    if (ctx->needs_input_grad(1)) {
      dw1 = WeightGradient(context, dpre, rows, type_of("w1_type"),
                           ctx->saved_data["w1_key"].toInt());
    }
    if (ctx->needs_input_grad(0)) {
      dx = dpre.mm(w1_half).view(ctx->saved_data["x_sizes"].toIntVector()).to(type_of("x_type"));
    }
    return {dx, dw1, db1.to(type_of("b1_type")), dw2, db2.to(type_of("b2_type")), torch::Tensor()};
  }
};

// The autocast type Stoke's path would compute in, or nullopt where ATen's linear runs.
// Without gradients (evaluation) the path is taken too: it multiplies with the step's
// 16-bit copies (half_weights.h), where ATen's linear under autocast would cast every
// weight again and keep each cast until autocast ends, a second copy of all of them.
std::optional<at::ScalarType> OwnKernelType(const torch::Tensor& x, const torch::Tensor& bias) {
  if (!bias.defined()) return std::nullopt;
  return StepHalfType(x);
}

// Stoke's path for x, with `activation` after the product; nullopt where ATen's runs.
std::optional<torch::Tensor> OwnLinear(const torch::Tensor& x, const torch::Tensor& weight,
                                       const torch::Tensor& bias, Activation activation) {
  const std::optional<at::ScalarType> type = OwnKernelType(x, bias);
  if (!type) return std::nullopt;
  return HalfLinearFunction::apply(x, weight, bias, static_cast<int64_t>(*type),
                                   static_cast<int64_t>(activation));
}

// Stoke's path for the two-layer GELU MLP; nullopt where ATen's runs.
std::optional<torch::Tensor> OwnGeluMlp(const torch::Tensor& x, const torch::Tensor& w1,
                                        const torch::Tensor& b1, const torch::Tensor& w2,
                                        const torch::Tensor& b2) {
  const std::optional<at::ScalarType> type = OwnKernelType(x, b1);
  if (!type || !b2.defined()) return std::nullopt;
  return GeluMlpFunction::apply(x, w1, b1, w2, b2, static_cast<int64_t>(*type));
}

#else

std::optional<at::ScalarType> OwnKernelType(const torch::Tensor& /*x*/,
                                            const torch::Tensor& /*bias*/) {
  return std::nullopt;
}

std::optional<torch::Tensor> OwnLinear(const torch::Tensor& /*x*/, const torch::Tensor& /*weight*/,
                                       const torch::Tensor& /*bias*/, Activation /*activation*/) {
  return std::nullopt;
}

std::optional<torch::Tensor> OwnGeluMlp(const torch::Tensor& /*x*/, const torch::Tensor& /*w1*/,
                                        const torch::Tensor& /*b1*/, const torch::Tensor& /*w2*/,
                                        const torch::Tensor& /*b2*/) {
  return std::nullopt;
}

#endif

}  // namespace

bool AutocastLinearUsesOwnKernels(const torch::Tensor& x, const torch::Tensor& bias) {
  return OwnKernelType(x, bias).has_value();
}

torch::Tensor AutocastLinear(const torch::Tensor& x, const torch::Tensor& weight,
                             const torch::Tensor& bias) {
  if (auto y = OwnLinear(x, weight, bias, Activation::kNone)) return *std::move(y);
  return torch::linear(x, weight, bias);
}

torch::Tensor AutocastLinearGelu(const torch::Tensor& x, const torch::Tensor& weight,
                                 const torch::Tensor& bias) {
  if (auto y = OwnLinear(x, weight, bias, Activation::kGelu)) return *std::move(y);
  return torch::gelu(torch::linear(x, weight, bias));
}

torch::Tensor AutocastLinearRelu(const torch::Tensor& x, const torch::Tensor& weight,
                                 const torch::Tensor& bias) {
  if (auto y = OwnLinear(x, weight, bias, Activation::kRelu)) return *std::move(y);
  return torch::relu(torch::linear(x, weight, bias));
}

torch::Tensor AutocastGeluMlp(const torch::Tensor& x, const torch::Tensor& w1,
                              const torch::Tensor& b1, const torch::Tensor& w2,
                              const torch::Tensor& b2) {
  if (auto y = OwnGeluMlp(x, w1, b1, w2, b2)) return *std::move(y);
  return torch::linear(torch::gelu(torch::linear(x, w1, b1)), w2, b2);
}

}  // namespace stoke::worker
