#include "worker/ops/cuda/cross_entropy_kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "worker/ops/cuda/half_convert.cuh"

namespace stoke::worker::cuda {
namespace {

// Eight two-byte logits: one 16-byte load or store.
constexpr int kPack = 8;
constexpr int kMaxThreads = 512;

// A running softmax denominator: sum of exp(x - max) over what was seen, with its max.
// Merging two rescales the smaller side, so one pass over a row is enough.
struct MaxSum {
  float max;
  float sum;
};

__device__ inline MaxSum Merge(MaxSum a, MaxSum b) {
  const float max = fmaxf(a.max, b.max);
  if (max == -INFINITY) return {max, 0.f};  // nothing but -inf seen yet: no 0 * inf
  return {max, a.sum * __expf(a.max - max) + b.sum * __expf(b.max - max)};
}

// The whole block's MaxSum, valid in thread 0. blockDim.x is a multiple of 32.
__device__ MaxSum BlockMerge(MaxSum v) {
  __shared__ float maxes[32];
  __shared__ float sums[32];
  for (int offset = 16; offset > 0; offset /= 2) {
    v = Merge(v, {__shfl_xor_sync(0xffffffffu, v.max, offset),
                  __shfl_xor_sync(0xffffffffu, v.sum, offset)});
  }
  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  if (lane == 0) {
    maxes[warp] = v.max;
    sums[warp] = v.sum;
  }
  __syncthreads();
  if (warp == 0) {
    const int warps = static_cast<int>(blockDim.x) / 32;
    v = lane < warps ? MaxSum{maxes[lane], sums[lane]} : MaxSum{-INFINITY, 0.f};
    for (int offset = 16; offset > 0; offset /= 2) {
      v = Merge(v, {__shfl_xor_sync(0xffffffffu, v.max, offset),
                    __shfl_xor_sync(0xffffffffu, v.sum, offset)});
    }
  }
  return v;
}

// One block per row. `packed`: cols is a multiple of kPack and the row 16-byte aligned.
template <typename T>
__global__ void CrossEntropyForwardKernel(const T* logits, const int64_t* targets, int64_t cols,
                                          bool packed, float* row_loss, float* row_lse) {
  const int64_t row = blockIdx.x;
  const T* x = logits + row * cols;
  MaxSum state{-INFINITY, 0.f};
  if (packed) {
    const int64_t packs = cols / kPack;
    for (int64_t p = threadIdx.x; p < packs; p += blockDim.x) {
      const uint4 bits = reinterpret_cast<const uint4*>(x)[p];
      const T* values = reinterpret_cast<const T*>(&bits);
      float f[kPack];
      float local = -INFINITY;
#pragma unroll
      for (int k = 0; k < kPack; ++k) {
        f[k] = ToFloat(values[k]);
        local = fmaxf(local, f[k]);
      }
      if (local == -INFINITY) continue;
      MaxSum add{local, 0.f};
#pragma unroll
      for (int k = 0; k < kPack; ++k) add.sum += __expf(f[k] - local);
      state = Merge(state, add);
    }
  } else {
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      const float f = ToFloat(x[j]);
      if (f != -INFINITY) state = Merge(state, {f, 1.f});
    }
  }
  state = BlockMerge(state);
  if (threadIdx.x == 0) {
    const float lse = state.max + logf(state.sum);
    const int64_t target = targets[row];
    row_lse[row] = lse;
    // An out-of-range target cannot be reported from here without a host sync; a NaN loss
    // makes it visible instead of reading past the row.
    row_loss[row] = target >= 0 && target < cols ? lse - ToFloat(x[target]) : NAN;
  }
}

__device__ inline float GradientAt(float logit, float lse, bool is_target, float scale) {
  // The target entry is p - 1: expf (not the faster __expf) keeps a confident target's
  // small gradient accurate.
  if (is_target) return (expf(logit - lse) - 1.f) * scale;
  return __expf(logit - lse) * scale;
}

template <typename T>
__global__ void CrossEntropyBackwardKernel(const T* logits, const int64_t* targets,
                                           const float* row_lse, const float* grad_loss,
                                           float scale, int64_t cols, bool packed, T* grad) {
  const int64_t row = blockIdx.x;
  const T* x = logits + row * cols;
  T* g = grad + row * cols;
  const float lse = row_lse[row];
  const float s = *grad_loss * scale;
  const int64_t target = targets[row];
  if (packed) {
    const int64_t packs = cols / kPack;
    for (int64_t p = threadIdx.x; p < packs; p += blockDim.x) {
      const uint4 bits = reinterpret_cast<const uint4*>(x)[p];
      const T* values = reinterpret_cast<const T*>(&bits);
      uint4 out_bits;
      T* out = reinterpret_cast<T*>(&out_bits);
#pragma unroll
      for (int k = 0; k < kPack; ++k) {
        out[k] = FromFloat<T>(GradientAt(ToFloat(values[k]), lse, p * kPack + k == target, s));
      }
      reinterpret_cast<uint4*>(g)[p] = out_bits;
    }
  } else {
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      g[j] = FromFloat<T>(GradientAt(ToFloat(x[j]), lse, j == target, s));
    }
  }
}

int ThreadsFor(int64_t items) {
  int threads = 32;
  while (threads < kMaxThreads && threads < items) threads *= 2;
  return threads;
}

const char* LastError() {
  const cudaError_t error = cudaGetLastError();
  return error == cudaSuccess ? nullptr : cudaGetErrorString(error);
}

}  // namespace

const char* CrossEntropyForward(const void* logits, HalfType type, const int64_t* targets,
                                int64_t rows, int64_t cols, float* row_loss, float* row_lse,
                                void* stream) {
  if (rows == 0) return nullptr;
  const bool packed = cols % kPack == 0 && AlignedTo(logits, 16);
  const int threads = ThreadsFor(packed ? cols / kPack : cols);
  const auto s = static_cast<cudaStream_t>(stream);
  const auto blocks = static_cast<unsigned>(rows);
  if (type == HalfType::kBFloat16) {
    CrossEntropyForwardKernel<<<blocks, threads, 0, s>>>(static_cast<const __nv_bfloat16*>(logits),
                                                         targets, cols, packed, row_loss, row_lse);
  } else {
    CrossEntropyForwardKernel<<<blocks, threads, 0, s>>>(static_cast<const __half*>(logits),
                                                         targets, cols, packed, row_loss, row_lse);
  }
  return LastError();
}

const char* CrossEntropyBackward(const void* logits, HalfType type, const int64_t* targets,
                                 const float* row_lse, const float* grad_loss, float scale,
                                 int64_t rows, int64_t cols, void* grad, void* stream) {
  if (rows == 0) return nullptr;
  const bool packed = cols % kPack == 0 && AlignedTo(logits, 16) && AlignedTo(grad, 16);
  const int threads = ThreadsFor(packed ? cols / kPack : cols);
  const auto s = static_cast<cudaStream_t>(stream);
  const auto blocks = static_cast<unsigned>(rows);
  if (type == HalfType::kBFloat16) {
    CrossEntropyBackwardKernel<<<blocks, threads, 0, s>>>(
        static_cast<const __nv_bfloat16*>(logits), targets, row_lse, grad_loss, scale, cols, packed,
        static_cast<__nv_bfloat16*>(grad));
  } else {
    CrossEntropyBackwardKernel<<<blocks, threads, 0, s>>>(static_cast<const __half*>(logits),
                                                          targets, row_lse, grad_loss, scale, cols,
                                                          packed, static_cast<__half*>(grad));
  }
  return LastError();
}

}  // namespace stoke::worker::cuda
