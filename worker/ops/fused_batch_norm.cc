#include "worker/ops/fused_batch_norm.h"

#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/torch.h>

#include <cstdint>

#include "worker/ops/step_context.h"

#if STOKE_WITH_CUDA_KERNELS
#include <c10/cuda/CUDAGuard.h>

#include "worker/ops/cuda/batch_norm_kernels.h"
#include "worker/ops/own_kernel_call.h"
#endif

namespace stoke::worker {
namespace {

torch::Tensor ModuleThenAct(torch::nn::BatchNorm2dImpl& norm, const torch::Tensor& x,
                            const torch::Tensor& residual, bool relu) {
  torch::Tensor y = norm.forward(x);
  if (residual.defined()) y = y + residual;
  return relu ? torch::relu(y) : y;
}

#if STOKE_WITH_CUDA_KERNELS

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

constexpr auto kChannelsLast = at::MemoryFormat::ChannelsLast;

bool Aligned(const torch::Tensor& t) {
  return reinterpret_cast<std::uintptr_t>(t.data_ptr()) % 16 == 0;
}

// A 4-d bf16/fp16 activation the kernels read as [N * H * W, C] rows of 8-channel vectors.
bool KernelsRead(const torch::Tensor& x) {
  return OwnKernelsAllowed() && x.is_cuda() && x.dim() == 4 &&
         (x.scalar_type() == torch::kBFloat16 || x.scalar_type() == torch::kHalf) &&
         x.is_contiguous(kChannelsLast) && x.size(1) >= 8 && x.size(1) % 8 == 0 &&
         x.numel() / x.size(1) >= 2 && Aligned(x);
}

int64_t Rows(const torch::Tensor& x) { return x.numel() / x.size(1); }

class BatchNormActFunction : public torch::autograd::Function<BatchNormActFunction> {
 public:
  static torch::Tensor forward(  // NOLINT(readability-identifier-naming)
      AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& weight,
      const torch::Tensor& bias, const torch::Tensor& residual, bool has_residual,
      torch::Tensor running_mean, torch::Tensor running_var, torch::Tensor batches_seen, double eps,
      double momentum, bool relu) {
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    const c10::cuda::CUDAGuard device(x.device());
    const int64_t channels = x.size(1);
    const int64_t rows = Rows(x);
    const auto f32 = x.options().dtype(torch::kFloat32);
    const torch::Tensor y = at::empty(x.sizes(), x.options(), kChannelsLast);
    const torch::Tensor mean = torch::empty({channels}, f32);
    const torch::Tensor invstd = torch::empty({channels}, f32);
    const torch::Tensor scratch = torch::empty({cuda::BatchNormScratch(rows, channels)}, f32);
    CheckKernel(cuda::BatchNormForward(
                    x.data_ptr(), has_residual ? residual.data_ptr() : nullptr,
                    HalfTypeOf(x.scalar_type(), "BatchNormAct"), weight.data_ptr<float>(),
                    bias.data_ptr<float>(), rows, channels, static_cast<float>(eps),
                    static_cast<float>(momentum), relu, running_mean.data_ptr<float>(),
                    running_var.data_ptr<float>(), batches_seen.data_ptr<int64_t>(), y.data_ptr(),
                    mean.data_ptr<float>(), invstd.data_ptr<float>(), scratch.data_ptr<float>(),
                    CurrentStreamOf(x)),
                "batch norm forward");
    // The output is the ReLU's mask (saved only with a ReLU: its presence says there was
    // one); the next convolution keeps it alive anyway.
    ctx->save_for_backward({x, relu ? y : torch::Tensor(), weight, mean, invstd});
    ctx->saved_data["residual"] = has_residual;
    return y;
  }

  static variable_list backward(  // NOLINT(readability-identifier-naming)
      AutogradContext* ctx, const variable_list& grad_outputs) {
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor& x = saved[0];
    const torch::Tensor& y = saved[1];
    const c10::cuda::CUDAGuard device(x.device());
    const bool relu = y.defined();
    const bool has_residual = ctx->saved_data["residual"].toBool();
    const int64_t channels = x.size(1);
    const int64_t rows = Rows(x);
    const auto f32 = x.options().dtype(torch::kFloat32);
    const torch::Tensor dy = grad_outputs[0].to(x.scalar_type()).contiguous(kChannelsLast);
    const torch::Tensor dx = at::empty(x.sizes(), x.options(), kChannelsLast);
    torch::Tensor dresidual;
    if (has_residual) dresidual = at::empty(x.sizes(), x.options(), kChannelsLast);
    const torch::Tensor dgamma = torch::empty({channels}, f32);
    const torch::Tensor dbeta = torch::empty({channels}, f32);
    const torch::Tensor scratch = torch::empty({cuda::BatchNormScratch(rows, channels)}, f32);
    CheckKernel(cuda::BatchNormBackward(dy.data_ptr(), x.data_ptr(), relu ? y.data_ptr() : nullptr,
                                        HalfTypeOf(x.scalar_type(), "BatchNormAct"),
                                        saved[2].data_ptr<float>(), saved[3].data_ptr<float>(),
                                        saved[4].data_ptr<float>(), rows, channels, dx.data_ptr(),
                                        has_residual ? dresidual.data_ptr() : nullptr,
                                        dgamma.data_ptr<float>(), dbeta.data_ptr<float>(),
                                        scratch.data_ptr<float>(), CurrentStreamOf(x)),
                "batch norm backward");
    return {dx,
            dgamma,
            dbeta,
            dresidual,
            torch::Tensor(),
            torch::Tensor(),
            torch::Tensor(),
            torch::Tensor(),
            torch::Tensor(),
            torch::Tensor(),
            torch::Tensor()};
  }
};

#endif

}  // namespace

bool BatchNormActUsesOwnKernels(const torch::nn::BatchNorm2dImpl& norm, const torch::Tensor& x,
                                const torch::Tensor& residual) {
#if STOKE_WITH_CUDA_KERNELS
  const auto& options = norm.options;
  // Batch statistics with an exponential running average: what the kernels compute.
  // Eval mode, a cumulative average (no momentum) or a norm without its parameters or
  // running statistics take the module.
  if (!norm.is_training() || !options.affine() || !options.track_running_stats() ||
      !options.momentum().has_value() || !KernelsRead(x)) {
    return false;
  }
  auto fp32_on_x = [&](const torch::Tensor& t) {
    return t.defined() && t.scalar_type() == torch::kFloat32 && t.device() == x.device() &&
           t.is_contiguous() && t.numel() == x.size(1);
  };
  if (!fp32_on_x(norm.weight) || !fp32_on_x(norm.bias) || !fp32_on_x(norm.running_mean) ||
      !fp32_on_x(norm.running_var)) {
    return false;
  }
  // The batch count, which the kernels advance.
  const torch::Tensor& seen = norm.num_batches_tracked;
  if (!seen.defined() || seen.scalar_type() != torch::kLong || seen.device() != x.device() ||
      seen.numel() != 1) {
    return false;
  }
  return !residual.defined() ||
         (residual.sizes() == x.sizes() && residual.scalar_type() == x.scalar_type() &&
          residual.device() == x.device());
#else
  (void)norm, (void)x, (void)residual;
  return false;
#endif
}

torch::Tensor BatchNormAct(torch::nn::BatchNorm2dImpl& norm, const torch::Tensor& x,
                           const torch::Tensor& residual, bool relu) {
#if STOKE_WITH_CUDA_KERNELS
  if (BatchNormActUsesOwnKernels(norm, x, residual)) {
    // The residual in the kernels' layout (a copy only if it is not in it already). With
    // none, an empty stand-in: autograd's apply takes only defined tensors.
    torch::Tensor rows_residual = torch::empty({0}, x.options());
    if (residual.defined()) {
      rows_residual = residual.contiguous(kChannelsLast);
      if (!Aligned(rows_residual)) rows_residual = rows_residual.clone(kChannelsLast);
    }
    // The kernels count the batch (num_batches_tracked) as the module's forward does, in
    // the launch that updates the running statistics.
    return BatchNormActFunction::apply(x, norm.weight, norm.bias, rows_residual, residual.defined(),
                                       norm.running_mean, norm.running_var,
                                       norm.num_batches_tracked, norm.options.eps(),
                                       *norm.options.momentum(), relu);
  }
#endif
  return ModuleThenAct(norm, x, residual, relu);
}

}  // namespace stoke::worker
