// Batch norm forward (batch_norm_kernels.h): per-channel statistics over the rows, then
// one normalising pass with the residual add and the ReLU.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "worker/ops/cuda/batch_norm_kernels.h"
#include "worker/ops/cuda/batch_norm_layout.cuh"
#include "worker/ops/cuda/half_convert.cuh"

namespace stoke::worker::cuda {
namespace batch_norm {
namespace {

// Rows lane `lane` of `lanes` visits in [first, last) when lanes take every lanes-th row.
__device__ inline float LaneRows(int64_t first, int64_t last, int lane, int lanes) {
  const int64_t span = last - first - lane;
  return span > 0 ? static_cast<float>((span + lanes - 1) / lanes) : 0.f;
}

// Per slice of rows and tile of channels: each channel's mean and sum of squared
// deviations over the slice, into partials [slice][2][channels]. A thread sums its rows'
// deviations from the first of them (no division per row, as Welford's update would
// need; with the shift a sample of the same channel, the sums stay of the spread's
// size, not the mean's), then the block's row lanes are combined as StatsFinalKernel
// combines slices, in closed form (two passes over the lanes, no division in either).
template <typename T>
__global__ void __launch_bounds__(kThreads)
    StatsPartialKernel(const T* __restrict__ x, int64_t rows, int64_t channels,
                       int64_t rows_per_slice, float* __restrict__ partials) {
  extern __shared__ float shared[];
  const auto [groups, lanes, width, vector, first, last] = SliceOfBlock(rows, rows_per_slice);
  float mean[kVector] = {};
  float m2[kVector] = {};
  const int64_t own = first + threadIdx.y;
  if (vector * kVector < channels && own < last) {
    const Pack<T> shift = Load(x + own * channels + vector * kVector);
    float s1[kVector] = {};
    float s2[kVector] = {};
#pragma unroll 4
    for (int64_t r = own + lanes; r < last; r += lanes) {
      const Pack<T> v = Load(x + r * channels + vector * kVector);
#pragma unroll
      for (int k = 0; k < kVector; ++k) {
        const float d = v[k] - shift[k];
        s1[k] += d;
        s2[k] += d * d;
      }
    }
    const float n = LaneRows(first, last, threadIdx.y, lanes);
#pragma unroll
    for (int k = 0; k < kVector; ++k) {
      const float d = s1[k] / n;
      mean[k] = shift[k] + d;
      m2[k] = fmaxf(s2[k] - s1[k] * d, 0.f);
    }
  }
  StageLanePair(shared, mean, m2);
  const int t = threadIdx.y * groups + threadIdx.x;
  const int64_t c = static_cast<int64_t>(blockIdx.y) * width + t;
  if (t >= width || c >= channels) return;
  float weighted = 0.f;
  for (int lane = 0; lane < lanes; ++lane) {
    weighted += LaneRows(first, last, lane, lanes) * shared[lane * width + t];
  }
  const float m = weighted / static_cast<float>(last - first);
  float s = 0.f;
  for (int lane = 0; lane < lanes; ++lane) {
    const float d = shared[lane * width + t] - m;
    s += shared[(lanes + lane) * width + t] + LaneRows(first, last, lane, lanes) * d * d;
  }
  partials[(static_cast<int64_t>(blockIdx.x) * 2) * channels + c] = m;
  partials[(static_cast<int64_t>(blockIdx.x) * 2 + 1) * channels + c] = s;
}

// Combines the slices per channel and from the batch's mean and variance writes what the
// rest needs: mean and invstd for backward, the running statistics, and the per-channel
// scale and shift the normalising pass uses. Chan's combination in closed form, in two
// passes over the partials (a few hundred KB, in L2): the batch mean is the slices' means
// weighted by their rows, and the sum of squared deviations is the sum over slices of
// m2 + rows * (slice mean - batch mean)^2. No cancellation (only deviations are squared)
// and no division per slice: combining slice by slice divided at every step, in a chain
// that made this kernel 12 us a call on a ResNet's layers.
__global__ void __launch_bounds__(kFinalChannels* kFinalLanes)
    StatsFinalKernel(const float* __restrict__ partials, int64_t slices, int64_t rows,
                     int64_t rows_per_slice, int64_t channels, const float* __restrict__ gamma,
                     const float* __restrict__ beta, float eps, float momentum, float* running_mean,
                     float* running_var, int64_t* batches_seen, float* mean_out, float* invstd_out,
                     float* scale, float* shift) {
  __shared__ LaneSums lane_means;
  __shared__ LaneSums lane_m2s;
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kFinalChannels + threadIdx.x;
  const bool in = c < channels;
  const auto rows_of = [&](int64_t slice) {
    return static_cast<float>(min(rows_per_slice, rows - slice * rows_per_slice));
  };
  float weighted = 0.f;
  if (in) {
#pragma unroll 4
    for (int64_t slice = threadIdx.y; slice < slices; slice += kFinalLanes) {
      weighted += rows_of(slice) * partials[(slice * 2) * channels + c];
    }
  }
  const float n = static_cast<float>(rows);
  const float m = SumOverLanes(lane_means, weighted) / n;
  float m2 = 0.f;
  if (in) {
#pragma unroll 4
    for (int64_t slice = threadIdx.y; slice < slices; slice += kFinalLanes) {
      const float d = partials[(slice * 2) * channels + c] - m;
      m2 += partials[(slice * 2 + 1) * channels + c] + rows_of(slice) * d * d;
    }
  }
  const float s = SumOverLanes(lane_m2s, m2);
  if (batches_seen != nullptr && blockIdx.x == 0 && threadIdx.x == 0 && threadIdx.y == 0) {
    ++*batches_seen;
  }
  if (threadIdx.y != 0 || !in) return;
  const float rstd = rsqrtf(s / n + eps);
  mean_out[c] = m;
  invstd_out[c] = rstd;
  // torch's BatchNorm: the running variance is the unbiased one.
  running_mean[c] = (1.f - momentum) * running_mean[c] + momentum * m;
  running_var[c] = (1.f - momentum) * running_var[c] + momentum * (s / (n - 1.f));
  const float sc = gamma[c] * rstd;
  scale[c] = sc;
  shift[c] = beta[c] - m * sc;
}

// ReLU as torch's: NaN stays NaN (a comparison with NaN is false).
__device__ inline float Relu(float v) { return v < 0.f ? 0.f : v; }

template <typename T>
__global__ void __launch_bounds__(kThreads)
    NormaliseKernel(const T* __restrict__ x, const T* __restrict__ residual,
                    const float* __restrict__ scale, const float* __restrict__ shift,
                    int64_t vectors, int64_t channel_vectors, bool relu, T* __restrict__ y) {
  const int64_t base = static_cast<int64_t>(blockIdx.x) * kThreads * kPerThread + threadIdx.x;
  Pack<T> xs[kPerThread];
  Pack<T> rs[kPerThread];
#pragma unroll
  for (int j = 0; j < kPerThread; ++j) {
    const int64_t i = base + j * kThreads;
    if (i < vectors) {
      xs[j] = Load(x + i * kVector);
      if (residual != nullptr) rs[j] = Load(residual + i * kVector);
    }
  }
#pragma unroll
  for (int j = 0; j < kPerThread; ++j) {
    const int64_t i = base + j * kThreads;
    if (i >= vectors) break;
    const int64_t c0 = (i % channel_vectors) * kVector;
    float a[kVector], b[kVector], v[kVector];
    LoadFloats(scale + c0, a);
    LoadFloats(shift + c0, b);
#pragma unroll
    for (int k = 0; k < kVector; ++k) {
      v[k] = xs[j][k] * a[k] + b[k];
      if (residual != nullptr) v[k] += rs[j][k];
      if (relu) v[k] = Relu(v[k]);
    }
    StoreVector(y + i * kVector, v);
  }
}

template <typename T>
void LaunchForward(const T* x, const T* residual, const float* gamma, const float* beta,
                   int64_t rows, int64_t channels, float eps, float momentum, bool relu,
                   float* running_mean, float* running_var, int64_t* batches_seen, T* y,
                   float* mean, float* invstd, float* scratch, cudaStream_t s) {
  const Tiling t = TilingFor(rows, channels);
  float* scale = scratch + t.slices * 2 * channels;
  float* shift = scale + channels;
  StatsPartialKernel<<<dim3(static_cast<unsigned>(t.slices), static_cast<unsigned>(t.tiles)),
                       dim3(t.groups, t.lanes), ReductionShared(t), s>>>(x, rows, channels,
                                                                         t.rows_per_slice, scratch);
  StatsFinalKernel<<<static_cast<unsigned>((channels + kFinalChannels - 1) / kFinalChannels),
                     dim3(kFinalChannels, kFinalLanes), 0, s>>>(
      scratch, t.slices, rows, t.rows_per_slice, channels, gamma, beta, eps, momentum, running_mean,
      running_var, batches_seen, mean, invstd, scale, shift);
  const int64_t vectors = rows * channels / kVector;
  NormaliseKernel<<<ElementBlocks(vectors), kThreads, 0, s>>>(x, residual, scale, shift, vectors,
                                                              channels / kVector, relu, y);
}

}  // namespace
}  // namespace batch_norm

int64_t BatchNormScratch(int64_t rows, int64_t channels) {
  return batch_norm::TilingFor(rows, channels).slices * 2 * channels + 3 * channels;
}

const char* BatchNormForward(const void* x, const void* residual, HalfType type, const float* gamma,
                             const float* beta, int64_t rows, int64_t channels, float eps,
                             float momentum, bool relu, float* running_mean, float* running_var,
                             int64_t* batches_seen, void* y, float* mean, float* invstd,
                             float* scratch, void* stream) {
  if (const char* error = batch_norm::CheckShape(rows, channels)) return error;
  const auto s = static_cast<cudaStream_t>(stream);
  if (type == HalfType::kBFloat16) {
    using T = __nv_bfloat16;
    batch_norm::LaunchForward(static_cast<const T*>(x), static_cast<const T*>(residual), gamma,
                              beta, rows, channels, eps, momentum, relu, running_mean, running_var,
                              batches_seen, static_cast<T*>(y), mean, invstd, scratch, s);
  } else {
    using T = __half;
    batch_norm::LaunchForward(static_cast<const T*>(x), static_cast<const T*>(residual), gamma,
                              beta, rows, channels, eps, momentum, relu, running_mean, running_var,
                              batches_seen, static_cast<T*>(y), mean, invstd, scratch, s);
  }
  return batch_norm::LastError();
}

}  // namespace stoke::worker::cuda
