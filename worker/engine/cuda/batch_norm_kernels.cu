#include "worker/engine/cuda/batch_norm_kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>

#include "worker/engine/cuda/half_convert.cuh"

namespace stoke::worker::cuda {
namespace {

// A thread reads 8 neighbouring channels (16 bytes) of a row at a time.
constexpr int kVector = 8;
// Reductions: blocks of 256 threads, up to 32 channel groups (256 channels) across by
// row lanes down; a grid of row slices by channel tiles sized to a few blocks per SM, so
// that a layer of 64 channels over 800k rows and one of 2048 over 12k both fill the GPU.
constexpr int kThreads = 256;
constexpr int kMaxGroups = 32;
constexpr int kBlocksPerSm = 4;
// Combining the slices: 32 channels across by 32 slice lanes down.
constexpr int kFinalChannels = 32;
constexpr int kFinalLanes = 32;
// Element-wise passes: vectors per thread, loaded before any is used.
constexpr int kPerThread = 2;

int SmCount() {
  static std::atomic<int> counts[64];
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess || device < 0 || device >= 64) return 132;
  int count = counts[device].load(std::memory_order_relaxed);
  if (count == 0) {
    if (cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) {
      count = 132;
    }
    counts[device].store(count, std::memory_order_relaxed);
  }
  return count;
}

struct Tiling {
  int groups;  // channel groups of 8 per block (blockDim.x)
  int lanes;   // row lanes per block (blockDim.y)
  int64_t tiles;
  int64_t slices;
  int64_t rows_per_slice;
};

Tiling TilingFor(int64_t rows, int64_t channels) {
  const int64_t vectors = channels / kVector;
  Tiling t;
  t.groups = static_cast<int>(std::min<int64_t>(vectors, kMaxGroups));
  t.lanes = kThreads / t.groups;
  t.tiles = (vectors + t.groups - 1) / t.groups;
  const int64_t wanted = (SmCount() * int64_t{kBlocksPerSm} + t.tiles - 1) / t.tiles;
  const int64_t most = (rows + t.lanes - 1) / t.lanes;  // a row per lane at least
  const int64_t slices = std::max<int64_t>(1, std::min(wanted, most));
  t.rows_per_slice = (rows + slices - 1) / slices;
  t.slices = (rows + t.rows_per_slice - 1) / t.rows_per_slice;  // none left empty
  return t;
}

// Rows lane `lane` of `lanes` visits in [first, last) when lanes take every lanes-th row.
__device__ inline float LaneRows(int64_t first, int64_t last, int lane, int lanes) {
  const int64_t span = last - first - lane;
  return span > 0 ? static_cast<float>((span + lanes - 1) / lanes) : 0.f;
}

// Chan et al.'s pairwise update: (n, mean, m2) absorbs (nb, mean_b, m2_b). No
// cancellation from E[x^2] - E[x]^2 when a channel's mean is large against its spread.
__device__ inline void Absorb(float& n, float& mean, float& m2, float nb, float mean_b,
                              float m2_b) {
  if (nb == 0.f) return;
  const float total = n + nb;
  const float delta = mean_b - mean;
  mean += delta * (nb / total);
  m2 += m2_b + delta * delta * (n * nb / total);
  n = total;
}

template <typename T>
struct Pack {
  uint4 bits;
  __device__ float operator[](int k) const { return ToFloat(reinterpret_cast<const T*>(&bits)[k]); }
};

template <typename T>
__device__ inline Pack<T> Load(const T* p) {
  return {*reinterpret_cast<const uint4*>(p)};
}

// 8 per-channel floats (two 16-byte loads; channel offsets are multiples of 8).
__device__ inline void LoadFloats(const float* p, float (&out)[kVector]) {
  const float4 a = *reinterpret_cast<const float4*>(p);
  const float4 b = *reinterpret_cast<const float4*>(p + 4);
  out[0] = a.x, out[1] = a.y, out[2] = a.z, out[3] = a.w;
  out[4] = b.x, out[5] = b.y, out[6] = b.z, out[7] = b.w;
}

// Per slice of rows and tile of channels: each channel's mean and sum of squared
// deviations over the slice, into partials [slice][2][channels]. A thread sums its rows'
// deviations from the first of them (no division per row, as Welford's update would
// need; with the shift a sample of the same channel, the sums stay of the spread's
// size, not the mean's), then the block's row lanes are combined by Chan's update in a
// fixed order.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    StatsPartialKernel(const T* __restrict__ x, int64_t rows, int64_t channels,
                       int64_t rows_per_slice, float* __restrict__ partials) {
  extern __shared__ float shared[];
  const int groups = blockDim.x, lanes = blockDim.y;
  const int width = groups * kVector;
  const int64_t vector = static_cast<int64_t>(blockIdx.y) * groups + threadIdx.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * rows_per_slice;
  const int64_t last = min(first + rows_per_slice, rows);
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
  float* lane_mean = shared + threadIdx.y * width + threadIdx.x * kVector;
  float* lane_m2 = lane_mean + lanes * width;
#pragma unroll
  for (int k = 0; k < kVector; ++k) {
    lane_mean[k] = mean[k];
    lane_m2[k] = m2[k];
  }
  __syncthreads();
  const int t = threadIdx.y * groups + threadIdx.x;
  const int64_t c = static_cast<int64_t>(blockIdx.y) * width + t;
  if (t >= width || c >= channels) return;
  float n = 0.f, m = 0.f, s = 0.f;
  for (int lane = 0; lane < lanes; ++lane) {
    Absorb(n, m, s, LaneRows(first, last, lane, lanes), shared[lane * width + t],
           shared[(lanes + lane) * width + t]);
  }
  partials[(static_cast<int64_t>(blockIdx.x) * 2) * channels + c] = m;
  partials[(static_cast<int64_t>(blockIdx.x) * 2 + 1) * channels + c] = s;
}

// Combines the slices per channel (32 slice lanes, then the lanes in order), and from the
// batch's mean and variance writes what the rest needs: mean and invstd for backward,
// the running statistics, and the per-channel scale and shift the normalising pass uses.
__global__ void __launch_bounds__(kFinalChannels* kFinalLanes)
    StatsFinalKernel(const float* __restrict__ partials, int64_t slices, int64_t rows,
                     int64_t rows_per_slice, int64_t channels, const float* __restrict__ gamma,
                     const float* __restrict__ beta, float eps, float momentum, float* running_mean,
                     float* running_var, float* mean_out, float* invstd_out, float* scale,
                     float* shift) {
  __shared__ float lane_n[kFinalLanes][kFinalChannels];
  __shared__ float lane_mean[kFinalLanes][kFinalChannels];
  __shared__ float lane_m2[kFinalLanes][kFinalChannels];
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kFinalChannels + threadIdx.x;
  float n = 0.f, m = 0.f, s = 0.f;
  if (c < channels) {
    // Loads a few slices ahead of the updates, whose divisions would otherwise leave
    // each load's latency exposed in turn.
    constexpr int kAhead = 4;
    for (int64_t base = threadIdx.y; base < slices; base += kAhead * kFinalLanes) {
      float means[kAhead], m2s[kAhead], counts[kAhead];
#pragma unroll
      for (int j = 0; j < kAhead; ++j) {
        const int64_t slice = base + j * kFinalLanes;
        const bool in = slice < slices;
        means[j] = in ? partials[(slice * 2) * channels + c] : 0.f;
        m2s[j] = in ? partials[(slice * 2 + 1) * channels + c] : 0.f;
        counts[j] =
            in ? static_cast<float>(min(rows_per_slice, rows - slice * rows_per_slice)) : 0.f;
      }
#pragma unroll
      for (int j = 0; j < kAhead; ++j) Absorb(n, m, s, counts[j], means[j], m2s[j]);
    }
  }
  lane_n[threadIdx.y][threadIdx.x] = n;
  lane_mean[threadIdx.y][threadIdx.x] = m;
  lane_m2[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y != 0 || c >= channels) return;
  for (int lane = 1; lane < kFinalLanes; ++lane) {
    Absorb(n, m, s, lane_n[lane][threadIdx.x], lane_mean[lane][threadIdx.x],
           lane_m2[lane][threadIdx.x]);
  }
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
    StoreVector8(y + i * kVector, v);
  }
}

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
  const int groups = blockDim.x, lanes = blockDim.y;
  const int width = groups * kVector;
  const int64_t vector = static_cast<int64_t>(blockIdx.y) * groups + threadIdx.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * rows_per_slice;
  const int64_t last = min(first + rows_per_slice, rows);
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
  float* lane_dz = shared + threadIdx.y * width + threadIdx.x * kVector;
  float* lane_dzx = lane_dz + lanes * width;
#pragma unroll
  for (int k = 0; k < kVector; ++k) {
    lane_dz[k] = sum_dz[k];
    lane_dzx[k] = sum_dzx[k];
  }
  __syncthreads();
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
  __shared__ float lane_dz[kFinalLanes][kFinalChannels];
  __shared__ float lane_dzx[kFinalLanes][kFinalChannels];
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kFinalChannels + threadIdx.x;
  float sdz = 0.f, sdzx = 0.f;
  if (c < channels) {
#pragma unroll 4
    for (int64_t slice = threadIdx.y; slice < slices; slice += kFinalLanes) {
      sdz += partials[(slice * 2) * channels + c];
      sdzx += partials[(slice * 2 + 1) * channels + c];
    }
  }
  lane_dz[threadIdx.y][threadIdx.x] = sdz;
  lane_dzx[threadIdx.y][threadIdx.x] = sdzx;
  __syncthreads();
  if (threadIdx.y != 0 || c >= channels) return;
  for (int lane = 1; lane < kFinalLanes; ++lane) {
    sdz += lane_dz[lane][threadIdx.x];
    sdzx += lane_dzx[lane][threadIdx.x];
  }
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
    StoreVector8(dx + i * kVector, v);
    if (dresidual != nullptr) StoreVector8(dresidual + i * kVector, dz);
  }
}

const char* LastError() {
  const cudaError_t error = cudaGetLastError();
  return error == cudaSuccess ? nullptr : cudaGetErrorString(error);
}

unsigned ElementBlocks(int64_t vectors) {
  return static_cast<unsigned>((vectors + kThreads * kPerThread - 1) / (kThreads * kPerThread));
}

size_t ReductionShared(const Tiling& t) { return sizeof(float) * 2 * t.lanes * t.groups * kVector; }

template <typename T>
void LaunchForward(const T* x, const T* residual, const float* gamma, const float* beta,
                   int64_t rows, int64_t channels, float eps, float momentum, bool relu,
                   float* running_mean, float* running_var, T* y, float* mean, float* invstd,
                   float* scratch, cudaStream_t s) {
  const Tiling t = TilingFor(rows, channels);
  float* scale = scratch + t.slices * 2 * channels;
  float* shift = scale + channels;
  StatsPartialKernel<<<dim3(static_cast<unsigned>(t.slices), static_cast<unsigned>(t.tiles)),
                       dim3(t.groups, t.lanes), ReductionShared(t), s>>>(x, rows, channels,
                                                                         t.rows_per_slice, scratch);
  StatsFinalKernel<<<static_cast<unsigned>((channels + kFinalChannels - 1) / kFinalChannels),
                     dim3(kFinalChannels, kFinalLanes), 0, s>>>(
      scratch, t.slices, rows, t.rows_per_slice, channels, gamma, beta, eps, momentum, running_mean,
      running_var, mean, invstd, scale, shift);
  const int64_t vectors = rows * channels / kVector;
  NormaliseKernel<<<ElementBlocks(vectors), kThreads, 0, s>>>(x, residual, scale, shift, vectors,
                                                              channels / kVector, relu, y);
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

int64_t BatchNormScratch(int64_t rows, int64_t channels) {
  return TilingFor(rows, channels).slices * 2 * channels + 3 * channels;
}

const char* BatchNormForward(const void* x, const void* residual, HalfType type, const float* gamma,
                             const float* beta, int64_t rows, int64_t channels, float eps,
                             float momentum, bool relu, float* running_mean, float* running_var,
                             void* y, float* mean, float* invstd, float* scratch, void* stream) {
  if (rows < 2 || channels < kVector || channels % kVector != 0) {
    return "batch norm kernels need 2 rows or more and a multiple of 8 channels";
  }
  const auto s = static_cast<cudaStream_t>(stream);
  if (type == HalfType::kBFloat16) {
    using T = __nv_bfloat16;
    LaunchForward(static_cast<const T*>(x), static_cast<const T*>(residual), gamma, beta, rows,
                  channels, eps, momentum, relu, running_mean, running_var, static_cast<T*>(y),
                  mean, invstd, scratch, s);
  } else {
    using T = __half;
    LaunchForward(static_cast<const T*>(x), static_cast<const T*>(residual), gamma, beta, rows,
                  channels, eps, momentum, relu, running_mean, running_var, static_cast<T*>(y),
                  mean, invstd, scratch, s);
  }
  return LastError();
}

const char* BatchNormBackward(const void* dy, const void* x, const void* y, HalfType type,
                              const float* gamma, const float* mean, const float* invstd,
                              int64_t rows, int64_t channels, void* dx, void* dresidual,
                              float* dgamma, float* dbeta, float* scratch, void* stream) {
  if (rows < 2 || channels < kVector || channels % kVector != 0) {
    return "batch norm kernels need 2 rows or more and a multiple of 8 channels";
  }
  const auto s = static_cast<cudaStream_t>(stream);
  if (type == HalfType::kBFloat16) {
    using T = __nv_bfloat16;
    LaunchBackward(static_cast<const T*>(dy), static_cast<const T*>(x), static_cast<const T*>(y),
                   gamma, mean, invstd, rows, channels, static_cast<T*>(dx),
                   static_cast<T*>(dresidual), dgamma, dbeta, scratch, s);
  } else {
    using T = __half;
    LaunchBackward(static_cast<const T*>(dy), static_cast<const T*>(x), static_cast<const T*>(y),
                   gamma, mean, invstd, rows, channels, static_cast<T*>(dx),
                   static_cast<T*>(dresidual), dgamma, dbeta, scratch, s);
  }
  return LastError();
}

}  // namespace stoke::worker::cuda
