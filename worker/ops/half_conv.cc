#include "worker/ops/half_conv.h"

#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/torch.h>

#include <array>
#include <optional>
#include <utility>
#include <variant>
#include <vector>

#include "worker/ops/step_context.h"

namespace stoke::worker {
namespace {

// The convolution's geometry where this path covers it: stride and padding per side, no
// dilation, one group, zero padding, no bias.
struct Geometry {
  std::vector<int64_t> stride;
  std::vector<int64_t> padding;
};

constexpr std::array<int64_t, 2> kNoDilation = {1, 1};

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
      PerSide(o.dilation()) != PerSide(kNoDilation)) {
    return std::nullopt;
  }
  return Geometry{PerSide(o.stride()), PerSide(*padding)};
}

#if STOKE_WITH_CUDA_KERNELS

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// A convolution that is not transposed has none.
constexpr std::array<int64_t, 2> kNoOutputPadding = {0, 0};

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
    torch::Tensor y = at::convolution(input, w, /*bias=*/{}, stride, padding, kNoDilation,
                                      /*transposed=*/false, kNoOutputPadding, /*groups=*/1);
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
    const std::vector<int64_t> stride = ctx->saved_data["stride"].toIntVector();
    const std::vector<int64_t> padding = ctx->saved_data["padding"].toIntVector();
    auto [dx, dw, unused_bias] = at::convolution_backward(
        grad_outputs[0].to(input.scalar_type()), input, w, /*bias_sizes=*/c10::nullopt, stride,
        padding, kNoDilation, /*transposed=*/false, kNoOutputPadding, /*groups=*/1,
        {ctx->needs_input_grad(0), ctx->needs_input_grad(1), false});
    auto type_of = [&](const char* key) {
      return static_cast<at::ScalarType>(ctx->saved_data[key].toInt());
    };
    if (dx.defined()) dx = dx.to(type_of("x_type"));
    if (dw.defined()) dw = dw.to(type_of("weight_type"));  // in the weight's own layout
    return {dx, dw, torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

#endif

}  // namespace

bool AutocastConv2dUsesStepCopies(const torch::nn::Conv2dImpl& conv, const torch::Tensor& x) {
  // Only a build with the kernels makes the step's copies.
  return STOKE_WITH_CUDA_KERNELS && StepHalfType(x).has_value() &&
         CoveredGeometry(conv).has_value();
}

torch::Tensor AutocastConv2d(torch::nn::Conv2dImpl& conv, const torch::Tensor& x) {
#if STOKE_WITH_CUDA_KERNELS
  if (const std::optional<at::ScalarType> type = StepHalfType(x)) {
    if (std::optional<Geometry> geometry = CoveredGeometry(conv)) {
      return HalfConvFunction::apply(x, conv.weight, std::move(geometry->stride),
                                     std::move(geometry->padding), static_cast<int64_t>(*type));
    }
  }
#endif
  return conv.forward(x);
}

}  // namespace stoke::worker
