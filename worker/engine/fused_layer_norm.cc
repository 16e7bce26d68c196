#include "worker/engine/fused_layer_norm.h"

#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/torch.h>

#include <vector>

#if STOKE_WITH_CUDA_KERNELS
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "worker/engine/cuda/layer_norm_kernels.h"
#endif

namespace stoke::worker {

#if STOKE_WITH_CUDA_KERNELS
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

void CheckLaunch(const char* error) {
  TORCH_CHECK(error == nullptr, "layer norm CUDA kernel failed: ", error);
}

cuda::HalfType HalfTypeOf(at::ScalarType type) {
  TORCH_CHECK(type == torch::kBFloat16 || type == torch::kHalf,
              "FusedLayerNorm: the output must be bf16 or fp16, not ", type);
  return type == torch::kBFloat16 ? cuda::HalfType::kBFloat16 : cuda::HalfType::kFloat16;
}

void* StreamOf(const torch::Tensor& t) {
  return c10::cuda::getCurrentCUDAStream(t.get_device()).stream();
}

class FusedLayerNormFunction : public torch::autograd::Function<FusedLayerNormFunction> {
 public:
  static torch::Tensor forward(  // NOLINT(readability-identifier-naming)
      AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& weight,
      const torch::Tensor& bias, double eps, int64_t out_dtype) {
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    const c10::cuda::CUDAGuard device(x.device());
    const int64_t width = x.size(-1);
    TORCH_CHECK(weight.numel() == width && bias.numel() == width,
                "FusedLayerNorm: weight and bias must have the input's last size ", width);
    const torch::Tensor rows = x.contiguous().view({-1, width});
    const torch::Tensor gamma = weight.to(torch::kFloat32).contiguous();
    const torch::Tensor beta = bias.to(torch::kFloat32).contiguous();
    const auto type = static_cast<at::ScalarType>(out_dtype);
    torch::Tensor y = torch::empty(x.sizes(), x.options().dtype(type));
    const auto f32 = x.options().dtype(torch::kFloat32);
    torch::Tensor mean = torch::empty({rows.size(0)}, f32);
    torch::Tensor rstd = torch::empty({rows.size(0)}, f32);
    CheckLaunch(cuda::LayerNormForward(
        rows.data_ptr<float>(), gamma.data_ptr<float>(), beta.data_ptr<float>(), rows.size(0),
        width, static_cast<float>(eps), y.data_ptr(), HalfTypeOf(type), mean.data_ptr<float>(),
        rstd.data_ptr<float>(), StreamOf(x)));
    ctx->save_for_backward({rows, gamma, mean, rstd});
    ctx->saved_data["sizes"] = x.sizes().vec();
    ctx->saved_data["out_dtype"] = out_dtype;
    return y;
  }

  static variable_list backward(  // NOLINT(readability-identifier-naming)
      AutogradContext* ctx, const variable_list& grad_outputs) {
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor& rows = saved[0];
    const c10::cuda::CUDAGuard device(rows.device());
    const auto type = static_cast<at::ScalarType>(ctx->saved_data["out_dtype"].toInt());
    const int64_t width = rows.size(1);
    const torch::Tensor dy = grad_outputs[0].to(type).contiguous();
    const auto f32 = rows.options();
    torch::Tensor dx = torch::empty(rows.sizes(), f32);
    torch::Tensor dgamma = torch::empty({width}, f32);
    torch::Tensor dbeta = torch::empty({width}, f32);
    torch::Tensor partials =
        torch::empty({cuda::LayerNormBackwardScratch(rows.size(0), width)}, f32);
    CheckLaunch(cuda::LayerNormBackward(
        dy.data_ptr(), HalfTypeOf(type), rows.data_ptr<float>(), saved[1].data_ptr<float>(),
        saved[2].data_ptr<float>(), saved[3].data_ptr<float>(), rows.size(0), width,
        dx.data_ptr<float>(), dgamma.data_ptr<float>(), dbeta.data_ptr<float>(),
        partials.data_ptr<float>(), StreamOf(rows)));
    return {dx.view(ctx->saved_data["sizes"].toIntVector()), dgamma, dbeta, torch::Tensor(),
            torch::Tensor()};
  }
};

}  // namespace

bool FusedLayerNormApplies(const torch::Tensor& x) {
  return x.is_cuda() && x.scalar_type() == torch::kFloat32 && x.dim() >= 1 && x.size(-1) > 0;
}

torch::Tensor FusedLayerNorm(const torch::Tensor& x, const torch::Tensor& weight,
                             const torch::Tensor& bias, double eps, at::ScalarType out_dtype) {
  return FusedLayerNormFunction::apply(x, weight, bias, eps, static_cast<int64_t>(out_dtype));
}

#else

bool FusedLayerNormApplies(const torch::Tensor& /*x*/) { return false; }

torch::Tensor FusedLayerNorm(const torch::Tensor& /*x*/, const torch::Tensor& /*weight*/,
                             const torch::Tensor& /*bias*/, double /*eps*/,
                             at::ScalarType /*out_dtype*/) {
  TORCH_CHECK(false, "this build has no CUDA kernels of Stoke's own (built without nvcc)");
}

#endif

}  // namespace stoke::worker
