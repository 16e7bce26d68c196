#include "worker/ops/fused_layer_norm.h"

#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/torch.h>

#include <utility>
#include <vector>

#include "worker/ops/step_context.h"

#if STOKE_WITH_CUDA_KERNELS
#include <c10/cuda/CUDAGuard.h>

#include "worker/ops/cuda/layer_norm_kernels.h"
#include "worker/ops/own_kernel_call.h"
#endif

namespace stoke::worker {

#if STOKE_WITH_CUDA_KERNELS
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

void CheckLaunch(const char* error) { CheckKernel(error, "layer norm"); }

struct NormParams {
  torch::Tensor gamma;
  torch::Tensor beta;
};

NormParams Fp32Params(const torch::Tensor& weight, const torch::Tensor& bias, int64_t width) {
  TORCH_CHECK(weight.numel() == width && bias.numel() == width,
              "FusedLayerNorm: weight and bias must have the input's last size ", width);
  return {weight.to(torch::kFloat32).contiguous(), bias.to(torch::kFloat32).contiguous()};
}

// Forward of both functions: rows [N, width] fp32; branch the same in `type` or undefined.
// Returns y (x's sizes, `type`), and the stream's new value when there is a branch.
struct Normed {
  torch::Tensor y;
  torch::Tensor sum;
  torch::Tensor mean;
  torch::Tensor rstd;
};

Normed Forward(const torch::Tensor& rows, const torch::Tensor& branch, const NormParams& params,
               double eps, at::ScalarType type) {
  const auto f32 = rows.options().dtype(torch::kFloat32);
  Normed n;
  n.y = torch::empty(rows.sizes(), rows.options().dtype(type));
  n.mean = torch::empty({rows.size(0)}, f32);
  n.rstd = torch::empty({rows.size(0)}, f32);
  if (branch.defined()) n.sum = torch::empty(rows.sizes(), f32);
  CheckLaunch(cuda::LayerNormForward(
      rows.data_ptr<float>(), branch.defined() ? branch.data_ptr() : nullptr,
      branch.defined() ? n.sum.data_ptr<float>() : nullptr, params.gamma.data_ptr<float>(),
      params.beta.data_ptr<float>(), rows.size(0), rows.size(1), static_cast<float>(eps),
      n.y.data_ptr(), HalfTypeOf(type, "FusedLayerNorm"), n.mean.data_ptr<float>(),
      n.rstd.data_ptr<float>(), CurrentStreamOf(rows)));
  return n;
}

struct NormGrads {
  torch::Tensor dx;
  torch::Tensor dx_low;
  torch::Tensor dgamma;
  torch::Tensor dbeta;
};

// Backward of both: `normed` the rows forward normalised, dy [N, width] in `type`,
// residual_grad fp32 [N, width] or undefined; the low-precision copy of dx when asked.
NormGrads Backward(const torch::Tensor& normed, const torch::Tensor& gamma,
                   const torch::Tensor& mean, const torch::Tensor& rstd, const torch::Tensor& dy,
                   const torch::Tensor& residual_grad, bool want_low, at::ScalarType type) {
  const int64_t rows = normed.size(0);
  const int64_t width = normed.size(1);
  const auto f32 = normed.options();
  NormGrads g;
  g.dx = torch::empty(normed.sizes(), f32);
  if (want_low) g.dx_low = torch::empty(normed.sizes(), normed.options().dtype(type));
  g.dgamma = torch::empty({width}, f32);
  g.dbeta = torch::empty({width}, f32);
  torch::Tensor partials = torch::empty({cuda::LayerNormBackwardScratch(rows, width)}, f32);
  CheckLaunch(cuda::LayerNormBackward(
      dy.data_ptr(), HalfTypeOf(type, "FusedLayerNorm"), normed.data_ptr<float>(),
      gamma.data_ptr<float>(), mean.data_ptr<float>(), rstd.data_ptr<float>(),
      residual_grad.defined() ? residual_grad.data_ptr<float>() : nullptr, rows, width,
      g.dx.data_ptr<float>(), want_low ? g.dx_low.data_ptr() : nullptr, g.dgamma.data_ptr<float>(),
      g.dbeta.data_ptr<float>(), partials.data_ptr<float>(), CurrentStreamOf(normed)));
  return g;
}

class FusedLayerNormFunction : public torch::autograd::Function<FusedLayerNormFunction> {
 public:
  static torch::Tensor forward(  // NOLINT(readability-identifier-naming)
      AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& weight,
      const torch::Tensor& bias, double eps, int64_t out_dtype) {
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    const c10::cuda::CUDAGuard device(x.device());
    const int64_t width = x.size(-1);
    const NormParams params = Fp32Params(weight, bias, width);
    const torch::Tensor rows = x.contiguous().view({-1, width});
    const auto type = static_cast<at::ScalarType>(out_dtype);
    const Normed n = Forward(rows, torch::Tensor(), params, eps, type);
    ctx->save_for_backward({rows, params.gamma, n.mean, n.rstd});
    ctx->saved_data["sizes"] = x.sizes().vec();
    ctx->saved_data["out_dtype"] = out_dtype;
    return n.y.view(x.sizes());
  }

  static variable_list backward(  // NOLINT(readability-identifier-naming)
      AutogradContext* ctx, const variable_list& grad_outputs) {
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    const auto saved = ctx->get_saved_variables();
    const c10::cuda::CUDAGuard device(saved[0].device());
    const auto type = static_cast<at::ScalarType>(ctx->saved_data["out_dtype"].toInt());
    const torch::Tensor dy = grad_outputs[0].to(type).contiguous().view(saved[0].sizes());
    const NormGrads g =
        Backward(saved[0], saved[1], saved[2], saved[3], dy, torch::Tensor(), false, type);
    return {g.dx.view(ctx->saved_data["sizes"].toIntVector()), g.dgamma, g.dbeta, torch::Tensor(),
            torch::Tensor()};
  }
};

// (x + branch, layer_norm(x + branch)): the residual connection and the norm after it.
class FusedAddLayerNormFunction : public torch::autograd::Function<FusedAddLayerNormFunction> {
 public:
  static variable_list forward(  // NOLINT(readability-identifier-naming)
      AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& branch,
      const torch::Tensor& weight, const torch::Tensor& bias, double eps, int64_t out_dtype) {
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    const c10::cuda::CUDAGuard device(x.device());
    const int64_t width = x.size(-1);
    const NormParams params = Fp32Params(weight, bias, width);
    const auto type = static_cast<at::ScalarType>(out_dtype);
    const torch::Tensor rows = x.contiguous().view({-1, width});
    const torch::Tensor branch_rows = branch.to(type).contiguous().view({-1, width});
    const Normed n = Forward(rows, branch_rows, params, eps, type);
    const torch::Tensor sum = n.sum.view(x.sizes());
    // The stream's new value is both an output and what backward normalises again.
    ctx->save_for_backward({sum, params.gamma, n.mean, n.rstd});
    ctx->saved_data["out_dtype"] = out_dtype;
    ctx->saved_data["branch_dtype"] = static_cast<int64_t>(branch.scalar_type());
    return {sum, n.y.view(x.sizes())};
  }

  static variable_list backward(  // NOLINT(readability-identifier-naming)
      AutogradContext* ctx, const variable_list& grad_outputs) {
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    const auto saved = ctx->get_saved_variables();
    const auto sizes = saved[0].sizes().vec();
    const torch::Tensor sum = saved[0].view({-1, sizes.back()});
    const c10::cuda::CUDAGuard device(sum.device());
    const auto type = static_cast<at::ScalarType>(ctx->saved_data["out_dtype"].toInt());
    const auto branch_type = static_cast<at::ScalarType>(ctx->saved_data["branch_dtype"].toInt());
    // A gradient autograd did not send (an output nobody used) is zero.
    torch::Tensor residual_grad;
    if (grad_outputs[0].defined()) {
      residual_grad = grad_outputs[0].to(torch::kFloat32).contiguous().view(sum.sizes());
    }
    const torch::Tensor dy = grad_outputs[1].defined()
                                 ? grad_outputs[1].to(type).contiguous().view(sum.sizes())
                                 : torch::zeros(sum.sizes(), sum.options().dtype(type));
    const NormGrads g = Backward(sum, saved[1], saved[2], saved[3], dy, residual_grad,
                                 /*want_low=*/branch_type == type, type);
    const torch::Tensor dbranch =
        g.dx_low.defined() ? g.dx_low.view(sizes) : g.dx.to(branch_type).view(sizes);
    return {g.dx.view(sizes), dbranch, g.dgamma, g.dbeta, torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

bool FusedLayerNormApplies(const torch::Tensor& x) {
  return OwnKernelsAllowed() && x.is_cuda() && x.scalar_type() == torch::kFloat32 && x.dim() >= 1 &&
         x.size(-1) > 0;
}

torch::Tensor FusedLayerNorm(const torch::Tensor& x, const torch::Tensor& weight,
                             const torch::Tensor& bias, double eps, at::ScalarType out_dtype) {
  return FusedLayerNormFunction::apply(x, weight, bias, eps, static_cast<int64_t>(out_dtype));
}

std::pair<torch::Tensor, torch::Tensor> FusedAddLayerNorm(const torch::Tensor& x,
                                                          const torch::Tensor& branch,
                                                          const torch::Tensor& weight,
                                                          const torch::Tensor& bias, double eps,
                                                          at::ScalarType out_dtype) {
  TORCH_CHECK(branch.sizes() == x.sizes(), "FusedAddLayerNorm: the branch has sizes ",
              branch.sizes(), ", the stream ", x.sizes());
  const variable_list out = FusedAddLayerNormFunction::apply(x, branch, weight, bias, eps,
                                                             static_cast<int64_t>(out_dtype));
  return {out[0], out[1]};
}

#else

bool FusedLayerNormApplies(const torch::Tensor& /*x*/) { return false; }

torch::Tensor FusedLayerNorm(const torch::Tensor& /*x*/, const torch::Tensor& /*weight*/,
                             const torch::Tensor& /*bias*/, double /*eps*/,
                             at::ScalarType /*out_dtype*/) {
  TORCH_CHECK(false, "this build has no CUDA kernels of Stoke's own (built without nvcc)");
}

std::pair<torch::Tensor, torch::Tensor> FusedAddLayerNorm(
    const torch::Tensor& /*x*/, const torch::Tensor& /*branch*/, const torch::Tensor& /*weight*/,
    const torch::Tensor& /*bias*/, double /*eps*/, at::ScalarType /*out_dtype*/) {
  TORCH_CHECK(false, "this build has no CUDA kernels of Stoke's own (built without nvcc)");
}

#endif

}  // namespace stoke::worker
