#include "worker/ops/fused_max_pool.h"

#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "worker/ops/step_context.h"

#if STOKE_WITH_CUDA_KERNELS
#include <c10/cuda/CUDAGuard.h>

#include "worker/ops/cuda/max_pool_kernels.h"
#include "worker/ops/own_kernel_call.h"
#endif

namespace stoke::worker {
namespace {

#if STOKE_WITH_CUDA_KERNELS

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

constexpr auto kChannelsLast = at::MemoryFormat::ChannelsLast;

cuda::PoolShape ShapeOf(const torch::Tensor& x, int64_t kernel, int64_t stride, int64_t padding) {
  cuda::PoolShape s;
  s.batch = x.size(0);
  s.channels = x.size(1);
  s.height = x.size(2);
  s.width = x.size(3);
  s.out_height = (s.height + 2 * padding - kernel) / stride + 1;
  s.out_width = (s.width + 2 * padding - kernel) / stride + 1;
  s.kernel = static_cast<int>(kernel);
  s.stride = static_cast<int>(stride);
  s.padding = static_cast<int>(padding);
  return s;
}

class MaxPoolFunction : public torch::autograd::Function<MaxPoolFunction> {
 public:
  static torch::Tensor forward(  // NOLINT(readability-identifier-naming)
      AutogradContext* ctx, const torch::Tensor& x, int64_t kernel, int64_t stride,
      int64_t padding) {
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    const c10::cuda::CUDAGuard device(x.device());
    const cuda::PoolShape s = ShapeOf(x, kernel, stride, padding);
    const std::vector<int64_t> out_sizes{s.batch, s.channels, s.out_height, s.out_width};
    const torch::Tensor y = at::empty(out_sizes, x.options(), kChannelsLast);
    // Which tap each output took: a byte per output, a quarter of what ATen's int64
    // indices would hold.
    const torch::Tensor taps =
        at::empty(out_sizes, x.options().dtype(torch::kUInt8), kChannelsLast);
    CheckKernel(cuda::MaxPoolForward(x.data_ptr(), HalfTypeOf(x.scalar_type(), "MaxPool2d"), s,
                                     y.data_ptr(), taps.data_ptr<uint8_t>(), CurrentStreamOf(x)),
                "max pool forward");
    ctx->save_for_backward({taps});
    ctx->saved_data["sizes"] = x.sizes().vec();
    ctx->saved_data["type"] = static_cast<int64_t>(x.scalar_type());
    ctx->saved_data["kernel"] = kernel;
    ctx->saved_data["stride"] = stride;
    ctx->saved_data["padding"] = padding;
    return y;
  }

  static variable_list backward(  // NOLINT(readability-identifier-naming)
      AutogradContext* ctx, const variable_list& grad_outputs) {
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    const torch::Tensor taps = ctx->get_saved_variables()[0];
    const c10::cuda::CUDAGuard device(taps.device());
    const std::vector<int64_t> sizes = ctx->saved_data["sizes"].toIntVector();
    // The gradient in the output's type and layout, whatever autograd brings.
    const auto type = static_cast<at::ScalarType>(ctx->saved_data["type"].toInt());
    const torch::Tensor dy_rows = grad_outputs[0].to(type).contiguous(kChannelsLast);
    const torch::Tensor dx = at::empty(sizes, dy_rows.options(), kChannelsLast);
    const cuda::PoolShape s =
        ShapeOf(dx, ctx->saved_data["kernel"].toInt(), ctx->saved_data["stride"].toInt(),
                ctx->saved_data["padding"].toInt());
    CheckKernel(
        cuda::MaxPoolBackward(dy_rows.data_ptr(), taps.data_ptr<uint8_t>(),
                              HalfTypeOf(type, "MaxPool2d"), s, dx.data_ptr(), CurrentStreamOf(dx)),
        "max pool backward");
    return {dx, torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

#endif

}  // namespace

bool MaxPoolUsesOwnKernels(const torch::Tensor& x, int64_t kernel, int64_t padding) {
#if STOKE_WITH_CUDA_KERNELS
  return OwnKernelsAllowed() && x.is_cuda() && x.dim() == 4 &&
         (x.scalar_type() == torch::kBFloat16 || x.scalar_type() == torch::kHalf) &&
         x.is_contiguous(at::MemoryFormat::ChannelsLast) && x.size(1) >= 8 && x.size(1) % 8 == 0 &&
         reinterpret_cast<std::uintptr_t>(x.data_ptr()) % 16 == 0 && kernel >= 1 &&
         kernel * kernel <= 255 && padding >= 0 && 2 * padding <= kernel &&
         x.size(2) + 2 * padding >= kernel && x.size(3) + 2 * padding >= kernel;
#else
  (void)x, (void)kernel, (void)padding;
  return false;
#endif
}

torch::Tensor MaxPool2d(const torch::Tensor& x, int64_t kernel, int64_t stride, int64_t padding) {
#if STOKE_WITH_CUDA_KERNELS
  if (stride >= 1 && MaxPoolUsesOwnKernels(x, kernel, padding)) {
    return MaxPoolFunction::apply(x, kernel, stride, padding);
  }
#endif
  return torch::max_pool2d(x, kernel, stride, padding);
}

}  // namespace stoke::worker
