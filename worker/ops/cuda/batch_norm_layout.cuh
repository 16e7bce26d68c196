// What the batch-norm kernels' two files (batch_norm_forward.cu, batch_norm_backward.cu)
// share: how a reduction over the rows is tiled onto the GPU, and the vector loads. Device
// code and host helpers; included by those two .cu files only.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>

#include "worker/ops/cuda/half_convert.cuh"

namespace stoke::worker::cuda::batch_norm {

// A thread reads 8 neighbouring channels (16 bytes) of a row at a time.
constexpr int kVector = 8;
// Reductions: blocks of 256 threads, up to 32 channel groups (256 channels) across by
// row lanes down; a grid of row slices by channel tiles sized to a few blocks per SM, so
// that a layer of 64 channels over 800k rows and one of 2048 over 12k both fill the GPU.
constexpr int kThreads = 256;
constexpr int kMaxGroups = 32;
constexpr int kBlocksPerSm = 4;
// Combining the slices: 8 channels across by 128 slice lanes down. The partials were just
// written and sit in L2, but a lane waits for each of its loads: with 32 lanes a thread
// read 17 slices of a 528-slice layer in turn and the kernel took 6.7 us; with 128 it
// reads about 4, all at once.
constexpr int kFinalChannels = 8;
constexpr int kFinalLanes = 128;
using LaneSums = float[kFinalLanes][kFinalChannels];
// Element-wise passes: vectors per thread, loaded before any is used.
constexpr int kPerThread = 2;

inline int SmCount() {
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

inline Tiling TilingFor(int64_t rows, int64_t channels) {
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

// Where a thread of a row-reduction block works: the block is `groups` channel groups
// across by `lanes` row lanes down (`width` = 8 * groups channels), the thread's 8-channel
// vector, and the rows [first, last) of the block's slice.
struct BlockSlice {
  int groups, lanes, width;
  int64_t vector, first, last;
};

__device__ inline BlockSlice SliceOfBlock(int64_t rows, int64_t rows_per_slice) {
  BlockSlice b;
  b.groups = static_cast<int>(blockDim.x);
  b.lanes = static_cast<int>(blockDim.y);
  b.width = b.groups * kVector;
  b.vector = static_cast<int64_t>(blockIdx.y) * b.groups + threadIdx.x;
  b.first = static_cast<int64_t>(blockIdx.x) * rows_per_slice;
  b.last = min(b.first + rows_per_slice, rows);
  return b;
}

// The row-reduction kernels' hand-over from row lanes to channels: each thread puts its
// two 8-channel vectors where one thread per channel then reads them all, `first` at
// shared[lane][column], `second` at shared[lanes + lane][column] (2 * lanes * width
// floats, width = 8 * blockDim.x), and the block waits for every lane's.
__device__ inline void StageLanePair(float* shared, const float (&first)[kVector],
                                     const float (&second)[kVector]) {
  const int width = blockDim.x * kVector;
  float* a = shared + threadIdx.y * width + threadIdx.x * kVector;
  float* b = a + blockDim.y * width;
#pragma unroll
  for (int k = 0; k < kVector; ++k) {
    a[k] = first[k];
    b[k] = second[k];
  }
  __syncthreads();
}

// A finishing block's per-lane values of its channels summed over the lanes, returned to
// every thread: a tree of seven steps with a barrier each (a fixed order, so the result does
// not depend on scheduling), not one thread per channel adding every lane in turn. Every
// thread of the block must call it; `sums` is not read again after it returns.
__device__ inline float SumOverLanes(LaneSums& sums, float own) {
  sums[threadIdx.y][threadIdx.x] = own;
  __syncthreads();
#pragma unroll
  for (int stride = kFinalLanes / 2; stride > 0; stride /= 2) {
    if (threadIdx.y < stride)
      sums[threadIdx.y][threadIdx.x] += sums[threadIdx.y + stride][threadIdx.x];
    __syncthreads();
  }
  return sums[0][threadIdx.x];
}

inline const char* LastError() {
  const cudaError_t error = cudaGetLastError();
  return error == cudaSuccess ? nullptr : cudaGetErrorString(error);
}

inline unsigned ElementBlocks(int64_t vectors) {
  return static_cast<unsigned>((vectors + kThreads * kPerThread - 1) / (kThreads * kPerThread));
}

inline size_t ReductionShared(const Tiling& t) {
  return sizeof(float) * 2 * t.lanes * t.groups * kVector;
}

// nullptr, or why the kernels cannot take [rows, channels].
inline const char* CheckShape(int64_t rows, int64_t channels) {
  if (rows < 2 || channels < kVector || channels % kVector != 0) {
    return "batch norm kernels need 2 rows or more and a multiple of 8 channels";
  }
  return nullptr;
}

}  // namespace stoke::worker::cuda::batch_norm
