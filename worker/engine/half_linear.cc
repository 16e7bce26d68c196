#include "worker/engine/half_linear.h"

#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/torch.h>

#include <optional>

#include "worker/engine/torch_compat.h"

#if STOKE_WITH_CUDA_KERNELS
#include <c10/cuda/CUDAGuard.h>

#include "worker/engine/cuda/column_sum_kernels.h"
#include "worker/engine/gradient_destinations.h"
#include "worker/engine/own_kernel_call.h"
#endif

namespace stoke::worker {

#if STOKE_WITH_CUDA_KERNELS
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// dy^T @ rows in the weight's type, written by the matrix product itself where the
// version allows (compat::MatmulInto), into the place a gradient reducer keeps this
// weight's gradient if it offered one (gradient_destinations.h).
torch::Tensor WeightGradient(const torch::Tensor& dy, const torch::Tensor& rows,
                             at::ScalarType weight_type, int64_t weight_key) {
  // NOLINTNEXTLINE(performance-no-int-to-ptr): the key is only compared, never dereferenced
  torch::Tensor dweight =
      GradientDestinations::Process().Take(reinterpret_cast<const void*>(weight_key));
  if (!dweight.defined()) {
    dweight = torch::empty({dy.size(1), rows.size(1)}, rows.options().dtype(weight_type));
  }
  compat::MatmulInto(dweight, dy.t(), rows);
  return dweight;
}

class HalfLinearFunction : public torch::autograd::Function<HalfLinearFunction> {
 public:
  static torch::Tensor forward(  // NOLINT(readability-identifier-naming)
      AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& weight,
      const torch::Tensor& bias, int64_t half_type) {
    // The casts autocast would make, made here once, and nothing cast again inside.
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    const auto type = static_cast<at::ScalarType>(half_type);
    const int64_t in = weight.size(1);
    const torch::Tensor rows = x.to(type).reshape({-1, in});
    const torch::Tensor w = weight.to(type);
    const torch::Tensor out = torch::addmm(bias.to(type), rows, w.t());
    ctx->save_for_backward({rows, w});
    ctx->saved_data["x_sizes"] = x.sizes().vec();
    ctx->saved_data["x_type"] = static_cast<int64_t>(x.scalar_type());
    ctx->saved_data["weight_type"] = static_cast<int64_t>(weight.scalar_type());
    // The weight's identity, not the weight: backward asks GradientDestinations with it.
    ctx->saved_data["weight_key"] = reinterpret_cast<int64_t>(weight.unsafeGetTensorImpl());
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
    const torch::Tensor dy = grad_outputs[0].to(rows.scalar_type()).reshape({-1, w.size(0)});
    torch::Tensor dx;
    torch::Tensor dweight;
    torch::Tensor dbias;
    if (ctx->needs_input_grad(0)) {
      dx = dy.mm(w).view(ctx->saved_data["x_sizes"].toIntVector()).to(type_of("x_type"));
    }
    if (ctx->needs_input_grad(1)) {
      dweight =
          WeightGradient(dy, rows, type_of("weight_type"), ctx->saved_data["weight_key"].toInt());
    }
    if (ctx->needs_input_grad(2)) {
      const torch::Tensor contiguous = dy.contiguous();
      const int64_t n = contiguous.size(0);
      const int64_t width = contiguous.size(1);
      const auto f32 = contiguous.options().dtype(torch::kFloat32);
      dbias = torch::empty({width}, f32);
      torch::Tensor partials = torch::empty({cuda::ColumnSumScratch(n, width)}, f32);
      CheckKernel(cuda::ColumnSums(contiguous.data_ptr(),
                                   HalfTypeOf(contiguous.scalar_type(), "AutocastLinear"), n, width,
                                   dbias.data_ptr<float>(), partials.data_ptr<float>(),
                                   CurrentStreamOf(contiguous)),
                  "column-sum");
      dbias = dbias.to(type_of("bias_type"));
    }
    return {dx, dweight, dbias, torch::Tensor()};
  }
};

// The autocast type Stoke's path would compute in, or nullopt where ATen's linear runs.
std::optional<at::ScalarType> OwnKernelType(const torch::Tensor& x, const torch::Tensor& bias) {
  if (!x.is_cuda() || !bias.defined() || !torch::GradMode::is_enabled()) return std::nullopt;
  const compat::AutocastState autocast = compat::GetAutocast(c10::DeviceType::CUDA);
  if (!autocast.enabled || (autocast.dtype != torch::kBFloat16 && autocast.dtype != torch::kHalf)) {
    return std::nullopt;
  }
  return autocast.dtype;
}

}  // namespace

bool AutocastLinearUsesOwnKernels(const torch::Tensor& x, const torch::Tensor& bias) {
  return OwnKernelType(x, bias).has_value();
}

torch::Tensor AutocastLinear(const torch::Tensor& x, const torch::Tensor& weight,
                             const torch::Tensor& bias) {
  const std::optional<at::ScalarType> type = OwnKernelType(x, bias);
  if (!type) return torch::linear(x, weight, bias);
  return HalfLinearFunction::apply(x, weight, bias, static_cast<int64_t>(*type));
}

#else

bool AutocastLinearUsesOwnKernels(const torch::Tensor& /*x*/, const torch::Tensor& /*bias*/) {
  return false;
}

torch::Tensor AutocastLinear(const torch::Tensor& x, const torch::Tensor& weight,
                             const torch::Tensor& bias) {
  return torch::linear(x, weight, bias);
}

#endif

}  // namespace stoke::worker
