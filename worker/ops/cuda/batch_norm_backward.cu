// Batch norm backward (batch_norm_kernels.h): per-channel sums of the gradient after the
// ReLU's mask, then one pass writing the input's and the residual's gradients.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "worker/ops/cuda/batch_norm_kernels.h"
#include "worker/ops/cuda/batch_norm_layout.cuh"
#include "worker/ops/cuda/half_convert.cuh"

namespace stoke::worker::cuda {
namespace batch_norm {
namespace {

// The gradient after the ReLU's mask, as torch's threshold_backward has it: dy where the
// output is positive, else 0.
template <typename T>
__device__ inline float Masked(const Pack<T>& dy, const Pack<T>& y, int k, bool relu) {
  return (!relu || y[k] > 0.f) ? dy[k] : 0.f;
}

// Per slice and tile as StatsPartialKernel: the sums of dz and dz * (x - mean) per
// channel (dz: dy after the ReLU's mask), into partials [slice][2][channels].
template <typename T>
__global__ void __launch_bounds__(kThreads)
    GradSumPartialKernel(const T* __restrict__ dy, const T* __restrict__ x, const T* __restrict__ y,
                         const float* __restrict__ mean, int64_t rows, int64_t channels,
                         int64_t rows_per_slice, float* __restrict__ partials) {
  extern __shared__ float shared[];
  const auto [groups, lanes, width, vector, first, last] = SliceOfBlock(rows, rows_per_slice);
  const bool relu = y != nullptr;
  float sum_dz[kVector] = {};
  float sum_dzx[kVector] = {};
  if (vector * kVector < channels) {
    float mu[kVector];
    LoadFloats(mean + vector * kVector, mu);
#pragma unroll 4
    for (int64_t r = first + threadIdx.y; r < last; r += lanes) {
      const int64_t at = r * channels + vector * kVector;
      const Pack<T> g = Load(dy + at);
      const Pack<T> v = Load(x + at);
      Pack<T> out{};
      if (relu) out = Load(y + at);
#pragma unroll
      for (int k = 0; k < kVector; ++k) {
        const float dz = Masked(g, out, k, relu);
        sum_dz[k] += dz;
        sum_dzx[k] += dz * (v[k] - mu[k]);
      }
    }
  }
  StageLanePair(shared, sum_dz, sum_dzx);
  const int t = threadIdx.y * groups + threadIdx.x;
  const int64_t c = static_cast<int64_t>(blockIdx.y) * width + t;
  if (t >= width || c >= channels) return;
  float a = 0.f, b = 0.f;
  for (int lane = 0; lane < lanes; ++lane) {
    a += shared[lane * width + t];
    b += shared[(lanes + lane) * width + t];
  }
  partials[(static_cast<int64_t>(blockIdx.x) * 2) * channels + c] = a;
  partials[(static_cast<int64_t>(blockIdx.x) * 2 + 1) * channels + c] = b;
}

// Sums the slices per channel (fixed order, so the result does not depend on
// scheduling) into dgamma and dbeta, and the coefficients of the input gradient:
// dx = gamma * invstd * (dz - mean(dz) - xhat * mean(dz * xhat)) = a * dz + b * x + c.
__global__ void __launch_bounds__(kFinalChannels* kFinalLanes)
    GradSumFinalKernel(const float* __restrict__ partials, int64_t slices, int64_t rows,
                       int64_t channels, const float* __restrict__ gamma,
                       const float* __restrict__ mean, const float* __restrict__ invstd,
                       float* dgamma, float* dbeta, float* coefficients) {
  __shared__ LaneSums lane_dz;
  __shared__ LaneSums lane_dzx;
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kFinalChannels + threadIdx.x;
  float sdz = 0.f, sdzx = 0.f;
  if (c < channels) {
#pragma unroll 4
    for (int64_t slice = threadIdx.y; slice < slices; slice += kFinalLanes) {
      sdz += partials[(slice * 2) * channels + c];
      sdzx += partials[(slice * 2 + 1) * channels + c];
    }
  }
  sdz = SumOverLanes(lane_dz, sdz);
  sdzx = SumOverLanes(lane_dzx, sdzx);
  if (threadIdx.y != 0 || c >= channels) return;
  const float rstd = invstd[c];
  const float n = static_cast<float>(rows);
  dbeta[c] = sdz;
  dgamma[c] = sdzx * rstd;
  const float a = gamma[c] * rstd;
  const float b = -a * rstd * rstd * sdzx / n;
  coefficients[c] = a;
  coefficients[channels + c] = b;
  // The mean folded into the constant: its rounding is fp32's against a gradient that
  // is stored in bf16/fp16.
  coefficients[2 * channels + c] = -a * sdz / n - b * mean[c];
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    InputGradKernel(const T* __restrict__ dy, const T* __restrict__ x, const T* __restrict__ y,
                    const float* __restrict__ coefficients, int64_t vectors,
                    int64_t channel_vectors, T* __restrict__ dx, T* __restrict__ dresidual) {
  const int64_t channels = channel_vectors * kVector;
  const int64_t base = static_cast<int64_t>(blockIdx.x) * kThreads * kPerThread + threadIdx.x;
  const bool relu = y != nullptr;
  Pack<T> gs[kPerThread];
  Pack<T> xs[kPerThread];
  Pack<T> ys[kPerThread];
#pragma unroll
  for (int j = 0; j < kPerThread; ++j) {
    const int64_t i = base + j * kThreads;
    if (i < vectors) {
      gs[j] = Load(dy + i * kVector);
      xs[j] = Load(x + i * kVector);
      if (relu) ys[j] = Load(y + i * kVector);
    }
  }
#pragma unroll
  for (int j = 0; j < kPerThread; ++j) {
    const int64_t i = base + j * kThreads;
    if (i >= vectors) break;
    const int64_t c0 = (i % channel_vectors) * kVector;
    float a[kVector], b[kVector], c[kVector], dz[kVector], v[kVector];
    LoadFloats(coefficients + c0, a);
    LoadFloats(coefficients + channels + c0, b);
    LoadFloats(coefficients + 2 * channels + c0, c);
#pragma unroll
    for (int k = 0; k < kVector; ++k) {
      dz[k] = Masked(gs[j], ys[j], k, relu);
      v[k] = a[k] * dz[k] + b[k] * xs[j][k] + c[k];
    }
    StoreVector(dx + i * kVector, v);
    if (dresidual != nullptr) StoreVector(dresidual + i * kVector, dz);
  }
}

template <typename T>
void LaunchBackward(const T* dy, const T* x, const T* y, const float* gamma, const float* mean,
                    const float* invstd, int64_t rows, int64_t channels, T* dx, T* dresidual,
                    float* dgamma, float* dbeta, float* scratch, cudaStream_t s) {
  const Tiling t = TilingFor(rows, channels);
  float* coefficients = scratch + t.slices * 2 * channels;
  GradSumPartialKernel<<<dim3(static_cast<unsigned>(t.slices), static_cast<unsigned>(t.tiles)),
                         dim3(t.groups, t.lanes), ReductionShared(t), s>>>(
      dy, x, y, mean, rows, channels, t.rows_per_slice, scratch);
  GradSumFinalKernel<<<static_cast<unsigned>((channels + kFinalChannels - 1) / kFinalChannels),
                       dim3(kFinalChannels, kFinalLanes), 0, s>>>(
      scratch, t.slices, rows, channels, gamma, mean, invstd, dgamma, dbeta, coefficients);
  const int64_t vectors = rows * channels / kVector;
  InputGradKernel<<<ElementBlocks(vectors), kThreads, 0, s>>>(dy, x, y, coefficients, vectors,
                                                              channels / kVector, dx, dresidual);
}

}  // namespace
}  // namespace batch_norm

const char* BatchNormBackward(const void* dy, const void* x, const void* y, HalfType type,
                              const float* gamma, const float* mean, const float* invstd,
                              int64_t rows, int64_t channels, void* dx, void* dresidual,
                              float* dgamma, float* dbeta, float* scratch, void* stream) {
  if (const char* error = batch_norm::CheckShape(rows, channels)) return error;
  const auto s = static_cast<cudaStream_t>(stream);
  if (type == HalfType::kBFloat16) {
    using T = __nv_bfloat16;
    batch_norm::LaunchBackward(static_cast<const T*>(dy), static_cast<const T*>(x),
                               static_cast<const T*>(y), gamma, mean, invstd, rows, channels,
                               static_cast<T*>(dx), static_cast<T*>(dresidual), dgamma, dbeta,
                               scratch, s);
  } else {
    using T = __half;
    batch_norm::LaunchBackward(static_cast<const T*>(dy), static_cast<const T*>(x),
                               static_cast<const T*>(y), gamma, mean, invstd, rows, channels,
                               static_cast<T*>(dx), static_cast<T*>(dresidual), dgamma, dbeta,
                               scratch, s);
  }
  return batch_norm::LastError();
}

}  // namespace stoke::worker::cuda
