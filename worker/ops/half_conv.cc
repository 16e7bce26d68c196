#include "worker/ops/half_conv.h"

#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/torch.h>

#include <optional>
#include <utility>
#include <variant>
#include <vector>

#include "worker/ops/step_context.h"
#include "worker/runtime/torch_compat.h"

namespace stoke::worker {
namespace {

// The convolution's geometry where this path covers it: stride and padding per side, no
// dilation, one group, zero padding, no bias.
struct Geometry {
  std::vector<int64_t> stride;
  std::vector<int64_t> padding;
};

// An option's numbers per side (an ExpandingArray converts to the reference).
std::vector<int64_t> PerSide(c10::IntArrayRef values) { return values.vec(); }

std::optional<Geometry> CoveredGeometry(const torch::nn::Conv2dImpl& conv) {
  // LibTorch 1.13's options hold c10::variant, 2.x's std::variant: unqualified calls find
  // either one's get_if and holds_alternative (the using-declarations make the explicit
  // template arguments parse; argument-dependent lookup adds c10's).
  using std::get_if;
  using std::holds_alternative;
  const auto& o = conv.options;
  const auto* padding = get_if<torch::ExpandingArray<2>>(&o.padding());
  if (padding == nullptr || o.groups() != 1 || o.transposed() || o.bias() ||
      !holds_alternative<torch::enumtype::kZeros>(o.padding_mode()) ||
      PerSide(o.dilation()) != std::vector<int64_t>{1, 1}) {
    return std::nullopt;
  }
  return Geometry{PerSide(o.stride()), PerSide(*padding)};
}

#if STOKE_WITH_CUDA_KERNELS

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

class HalfConvFunction : public torch::autograd::Function<HalfConvFunction> {
 public:
  static torch::Tensor forward(  // NOLINT(readability-identifier-naming)
      AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& weight,
      std::vector<int64_t> stride, std::vector<int64_t> padding, int64_t half_type) {
    // Autocast's casts, made here (the input's is a no-op inside a bf16 network), and
    // nothing cast again inside.
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    const auto type = static_cast<at::ScalarType>(half_type);
    const torch::Tensor input = x.to(type);
    const torch::Tensor w = StepHalfCopy(StepContext::Current(), weight, type);
    const std::vector<int64_t> dilation = {1, 1};
    const std::vector<int64_t> no_output_padding = {0, 0};
    torch::Tensor y = at::convolution(input, w, /*bias=*/{}, stride, padding, dilation,
                                      /*transposed=*/false, no_output_padding, /*groups=*/1);
    ctx->save_for_backward({input, w});
    ctx->saved_data["stride"] = std::move(stride);
    ctx->saved_data["padding"] = std::move(padding);
    ctx->saved_data["x_type"] = static_cast<int64_t>(x.scalar_type());
    ctx->saved_data["weight_type"] = static_cast<int64_t>(weight.scalar_type());
    return y;
  }

  static variable_list backward(  // NOLINT(readability-identifier-naming)
      AutogradContext* ctx, const variable_list& grad_outputs) {
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor& input = saved[0];
    const torch::Tensor& w = saved[1];
    const std::vector<int64_t> dilation = {1, 1};
    const std::vector<int64_t> no_output_padding = {0, 0};
    const std::vector<int64_t> stride = ctx->saved_data["stride"].toIntVector();
    const std::vector<int64_t> padding = ctx->saved_data["padding"].toIntVector();
    auto [dx, dw, unused_bias] = at::convolution_backward(
        grad_outputs[0].to(input.scalar_type()), input, w, /*bias_sizes=*/c10::nullopt, stride,
        padding, dilation, /*transposed=*/false, no_output_padding, /*groups=*/1,
        {ctx->needs_input_grad(0), ctx->needs_input_grad(1), false});
    auto type_of = [&](const char* key) {
      return static_cast<at::ScalarType>(ctx->saved_data[key].toInt());
    };
    if (dx.defined()) dx = dx.to(type_of("x_type"));
    if (dw.defined()) dw = dw.to(type_of("weight_type"));  // in the weight's own layout
    return {dx, dw, torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

// The autocast type the path computes in, or nullopt where the module's forward runs.
std::optional<at::ScalarType> StepCopyType(const torch::Tensor& x) {
  if (!OwnKernelsAllowed() || !x.is_cuda()) return std::nullopt;
  const compat::AutocastState autocast = compat::GetAutocast(c10::DeviceType::CUDA);
  if (!autocast.enabled || (autocast.dtype != torch::kBFloat16 && autocast.dtype != torch::kHalf)) {
    return std::nullopt;
  }
  return autocast.dtype;
}

#else

std::optional<at::ScalarType> StepCopyType(const torch::Tensor& /*x*/) { return std::nullopt; }

#endif

}  // namespace

bool AutocastConv2dUsesStepCopies(const torch::nn::Conv2dImpl& conv, const torch::Tensor& x) {
  return StepCopyType(x).has_value() && CoveredGeometry(conv).has_value();
}

torch::Tensor AutocastConv2d(const torch::nn::Conv2dImpl& conv, const torch::Tensor& x) {
#if STOKE_WITH_CUDA_KERNELS
  if (const std::optional<at::ScalarType> type = StepCopyType(x)) {
    if (std::optional<Geometry> geometry = CoveredGeometry(conv)) {
      return HalfConvFunction::apply(x, conv.weight, std::move(geometry->stride),
                                     std::move(geometry->padding), static_cast<int64_t>(*type));
    }
  }
#endif
  // The module's forward is not const; nothing of the module changes in it.
  return const_cast<torch::nn::Conv2dImpl&>(conv).forward(
      x);  // NOLINT(cppcoreguidelines-pro-type-const-cast)
}

}  // namespace stoke::worker
