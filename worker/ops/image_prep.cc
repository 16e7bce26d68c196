#include "worker/ops/image_prep.h"

#include <torch/torch.h>

#include "worker/ops/cuda/image_prep_kernels.h"  // torch- and CUDA-free: the draws' encoding
#include "worker/ops/step_context.h"

#if STOKE_WITH_CUDA_KERNELS
#include <c10/cuda/CUDAGuard.h>

#include "worker/ops/own_kernel_call.h"
#endif

namespace stoke::worker {

bool ImagePrepUsesOwnKernel(const torch::Tensor& images) {
#if STOKE_WITH_CUDA_KERNELS
  return OwnKernelsAllowed() && images.is_cuda() && images.dim() == 4 &&
         images.scalar_type() == torch::kUInt8 && images.is_contiguous();
#else
  (void)images;
  return false;
#endif
}

torch::Tensor DrawCropsAndFlips(int64_t n, int64_t padding, bool flip, torch::Device device) {
  return torch::randint(0, cuda::CropFlipChoices(padding, flip), {n},
                        torch::TensorOptions().device(device).dtype(torch::kLong));
}

torch::Tensor PrepareImages(const torch::Tensor& images, const torch::Tensor& draws,
                            int64_t padding, const torch::Tensor& mean,
                            const torch::Tensor& std_dev, bool channels_last) {
  TORCH_CHECK(ImagePrepUsesOwnKernel(images),
              "PrepareImages: needs contiguous uint8 [n, c, h, w] CUDA images and Stoke's "
              "kernels");
#if STOKE_WITH_CUDA_KERNELS
  const c10::cuda::CUDAGuard device(images.device());
  const int64_t n = images.size(0), c = images.size(1);
  TORCH_CHECK(mean.defined() == std_dev.defined(), "PrepareImages: mean and std go together");
  const torch::Tensor mean_values = mean.defined() ? mean.to(torch::kFloat32).contiguous() : mean;
  const torch::Tensor std_values =
      std_dev.defined() ? std_dev.to(torch::kFloat32).contiguous() : std_dev;
  if (mean.defined()) {
    TORCH_CHECK(mean_values.numel() == c && std_values.numel() == c &&
                    mean_values.device() == images.device() &&
                    std_values.device() == images.device(),
                "PrepareImages: mean and std need one float per channel on the images' device");
  }
  if (draws.defined()) {
    TORCH_CHECK(draws.scalar_type() == torch::kLong && draws.numel() == n &&
                    draws.is_contiguous() && draws.device() == images.device(),
                "PrepareImages: draws need one int64 per image on the images' device");
  }
  const torch::Tensor out =
      at::empty(images.sizes(), images.options().dtype(torch::kFloat32),
                channels_last ? at::MemoryFormat::ChannelsLast : at::MemoryFormat::Contiguous);
  const cuda::ImageBatchShape shape{n, c, images.size(2), images.size(3)};
  CheckKernel(cuda::PrepareImages(images.data_ptr<uint8_t>(), shape,
                                  draws.defined() ? draws.data_ptr<int64_t>() : nullptr, padding,
                                  mean.defined() ? mean_values.data_ptr<float>() : nullptr,
                                  std_dev.defined() ? std_values.data_ptr<float>() : nullptr,
                                  channels_last, out.data_ptr<float>(), CurrentStreamOf(images)),
              "image prep");
  return out;
#else
  (void)draws, (void)padding, (void)mean, (void)std_dev, (void)channels_last;
  return torch::Tensor();
#endif
}

}  // namespace stoke::worker
