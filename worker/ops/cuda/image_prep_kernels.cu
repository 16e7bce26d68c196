#include "worker/ops/cuda/image_prep_kernels.h"

#include <cuda_runtime.h>

#include <cstdint>

namespace stoke::worker::cuda {
namespace {

constexpr int kThreads = 256;

// The reciprocal ATen multiplies by for a division by the host scalar 255: fp32's 1/255,
// rounded once (as the host computes it before its launch).
constexpr float kInverse255 = 1.0f / 255.0f;

// Where one image's crop window starts in its zero-padded self, and whether it is mirrored.
struct Placement {
  int64_t dy, dx;
  bool flip;
};

__device__ inline Placement PlacementOf(const int64_t* draws, int64_t n, int64_t padding) {
  if (draws == nullptr) return {padding, padding, false};
  const int64_t k = 2 * padding + 1;
  const int64_t r = draws[n];
  return {(r / k) % k, r % k, r / (k * k) != 0};
}

// One output element per thread: a batch of 256 28x28 images is 200,704 of them, and a
// thread's work is one byte read, a few integer divisions and three fp32 operations.
// The intrinsics round each step on its own (no fused multiply-add), as ATen's separate
// kernels do.
template <bool kChannelsLast>
__global__ void __launch_bounds__(kThreads)
    PrepareImagesKernel(const uint8_t* __restrict__ images, ImageBatchShape s,
                        const int64_t* __restrict__ draws, int64_t padding,
                        const float* __restrict__ mean, const float* __restrict__ std_dev,
                        int64_t total, float* __restrict__ out) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= total) return;
  int64_t n, c, y, x;
  if (kChannelsLast) {
    c = i % s.channels;
    const int64_t pixel = i / s.channels;
    x = pixel % s.width;
    y = (pixel / s.width) % s.height;
    n = pixel / (s.width * s.height);
  } else {
    x = i % s.width;
    y = (i / s.width) % s.height;
    c = (i / (s.width * s.height)) % s.channels;
    n = i / (s.width * s.height * s.channels);
  }
  const Placement at = PlacementOf(draws, n, padding);
  const int64_t column = (at.flip ? s.width - 1 - x : x) + at.dx - padding;
  const int64_t row = y + at.dy - padding;
  float v = 0.0f;
  if (row >= 0 && row < s.height && column >= 0 && column < s.width) {
    const uint8_t byte = images[((n * s.channels + c) * s.height + row) * s.width + column];
    v = __fmul_rn(static_cast<float>(byte), kInverse255);
  }
  if (mean != nullptr) v = __fdiv_rn(__fsub_rn(v, mean[c]), std_dev[c]);
  out[i] = v;
}

}  // namespace

const char* PrepareImages(const uint8_t* images, const ImageBatchShape& shape, const int64_t* draws,
                          int64_t padding, const float* mean, const float* std_dev,
                          bool channels_last, float* out, void* stream) {
  if (padding < 0 || (mean == nullptr) != (std_dev == nullptr)) {
    return "image prep kernel: negative padding, or only one of mean and std";
  }
  const int64_t total = shape.batch * shape.channels * shape.height * shape.width;
  if (total == 0) return nullptr;
  const auto s = static_cast<cudaStream_t>(stream);
  const auto blocks = static_cast<unsigned>((total + kThreads - 1) / kThreads);
  if (channels_last) {
    PrepareImagesKernel<true>
        <<<blocks, kThreads, 0, s>>>(images, shape, draws, padding, mean, std_dev, total, out);
  } else {
    PrepareImagesKernel<false>
        <<<blocks, kThreads, 0, s>>>(images, shape, draws, padding, mean, std_dev, total, out);
  }
  const cudaError_t error = cudaGetLastError();
  return error == cudaSuccess ? nullptr : cudaGetErrorString(error);
}

}  // namespace stoke::worker::cuda
