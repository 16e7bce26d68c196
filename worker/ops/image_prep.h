// A training batch's images prepared on the GPU in one launch of Stoke's kernel
// (worker/ops/cuda/image_prep_kernels.h) plus one torch::randint for the whole batch's
// crop offsets and flips, where ATen's composition takes about 18 launches. For CUDA
// uint8 NCHW images in builds with nvcc (STOKE_WITH_CUDA_KERNELS) where the step context
// allows Stoke's kernels; BatchPrep keeps ATen's composition for everything else.
#pragma once

#include <torch/types.h>

#include <cstdint>

namespace stoke::worker {

// Whether PrepareImages can take `images`: a contiguous uint8 [n, c, h, w] CUDA tensor,
// with Stoke's kernels built and allowed.
bool ImagePrepUsesOwnKernel(const torch::Tensor& images);

// One int64 per image, drawn uniformly in one launch, that says where its crop window
// lies in its zero-padded self and whether it is mirrored. With k = 2 * padding + 1:
// dx = r % k, dy = (r / k) % k, flip = r / k^2 (always 0 without `flip`).
torch::Tensor DrawCropsAndFlips(int64_t n, int64_t padding, bool flip, torch::Device device);

// fp32 [n, c, h, w] (NHWC memory where channels_last, else contiguous):
//   (pixel / 255 - mean[c]) / std_dev[c]
// of each image's window (dy, dx) of its zero-padded self, mirrored left-right where its
// flip bit is set, as RandomCrop then RandomHorizontalFlip then the normalization compute
// them in ATen. draws: DrawCropsAndFlips(n, padding, ...), or undefined for no crop and
// no flip. mean and std_dev: c floats on the images' device (any shape), or both undefined
// for no normalization. Needs ImagePrepUsesOwnKernel(images).
torch::Tensor PrepareImages(const torch::Tensor& images, const torch::Tensor& draws,
                            int64_t padding, const torch::Tensor& mean,
                            const torch::Tensor& std_dev, bool channels_last);

}  // namespace stoke::worker
