#include "worker/ops/cuda/column_sum_kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "worker/ops/cuda/half_convert.cuh"

namespace stoke::worker::cuda {
namespace {

// Grids are slices of rows along x (up to 2^31 - 1 of them: a batch search may try
// millions of rows) by column blocks along y. A block is kLanes row lanes by kGroups
// column groups; in the vector path a thread
// reads 8 neighbouring columns (16 bytes) per row, so a warp reads 512 contiguous bytes.
constexpr int kGroups = 32;
constexpr int kLanes = 8;
constexpr int kVector = 8;
// Rows per block: blocks enough to keep every SM's loads in flight even for a narrow
// layer (GPT-2's 768 columns over 16k rows: 768 blocks), while the partial sums stay a
// few percent of the input for the second pass to read. Fewer rows when there are few
// (at least a lane's worth each): an MLP's 512 rows make 64 slices of 8, not 8 of 64,
// which left most SMs idle (a 4096-wide GELU backward was latency-bound). A
// function of the row count alone, so sums do not depend on the device.
constexpr int64_t kMaxRowsPerSlice = 64;
constexpr int64_t kTargetSlices = 256;

__host__ __device__ inline int64_t RowsPerSlice(int64_t rows) {
  const int64_t even = (rows + kTargetSlices - 1) / kTargetSlices;
  return even < kLanes ? kLanes : (even > kMaxRowsPerSlice ? kMaxRowsPerSlice : even);
}

int64_t Slices(int64_t rows) {
  const int64_t per_slice = RowsPerSlice(rows);
  return std::max<int64_t>(1, (rows + per_slice - 1) / per_slice);
}

// What the partial kernels sum: the input itself, or (after an activation) the gradient
// of the activation's input, dy * act'(saved), which they also write to dpre as they go,
// rounded to T. GELU saves its input; ReLU its output (x > 0 exactly where relu(x) > 0).
enum class Act { kNone, kGelu, kRelu };

template <typename T>
struct ActivationInput {
  const T* saved = nullptr;  // nullptr with kNone
  T* dpre = nullptr;
};

// d gelu(x) / dx for the exact (erf) GELU, as ATen's gelu_backward computes it in fp32.
__device__ inline float GeluGrad(float x) {
  constexpr float kInvSqrt2 = 0.70710678118654752440f;
  constexpr float kInvSqrt2Pi = 0.39894228040143267794f;
  const float cdf = 0.5f * (1.f + erff(x * kInvSqrt2));
  const float pdf = expf(-0.5f * x * x) * kInvSqrt2Pi;
  return cdf + x * pdf;
}

// The activation input's gradient for one element, as ATen's gelu_backward and
// threshold_backward give it (the ReLU's is dy itself or zero: no rounding).
template <Act kAct>
__device__ inline float ActivationGrad(float dy, float saved) {
  if constexpr (kAct == Act::kGelu) return dy * GeluGrad(saved);
  return saved > 0.f ? dy : 0.f;
}

// partials[slice][c] = sum over the slice's rows of in[r][c], for the block's columns.
// Vector path: width % 8 == 0 and 16-byte aligned rows. One instance per activation:
// chosen at run time, the plain sums carried the activations' registers (37 per thread
// alone, 96 with GELU's and ReLU's branches: a third of the blocks per SM).
template <typename T, Act kAct>
__global__ void ColumnSumPartialVectorKernel(const T* in, ActivationInput<T> act, int64_t rows,
                                             int64_t width, float* partials) {
  __shared__ float sums[kLanes][kGroups * kVector];
  const int64_t c0 = (static_cast<int64_t>(blockIdx.y) * kGroups + threadIdx.x) * kVector;
  const int64_t per_slice = RowsPerSlice(rows);
  const int64_t first = static_cast<int64_t>(blockIdx.x) * per_slice;
  const int64_t last = min(first + per_slice, rows);
  float acc[kVector] = {};
  if (c0 < width) {
#pragma unroll 8
    for (int64_t r = first + threadIdx.y; r < last; r += kLanes) {
      float v[kVector];
      LoadVector(in + r * width + c0, v);
      if constexpr (kAct != Act::kNone) {
        float saved[kVector];
        LoadVector(act.saved + r * width + c0, saved);
#pragma unroll
        for (int k = 0; k < kVector; ++k) {
          v[k] = ToFloat(FromFloat<T>(ActivationGrad<kAct>(v[k], saved[k])));
        }
        StoreVector(act.dpre + r * width + c0, v);
      }
#pragma unroll
      for (int k = 0; k < kVector; ++k) acc[k] += v[k];
    }
  }
#pragma unroll
  for (int k = 0; k < kVector; ++k) sums[threadIdx.y][threadIdx.x * kVector + k] = acc[k];
  __syncthreads();
  // Then each of the block's 256 threads adds one column over the row lanes.
  const int t = threadIdx.y * kGroups + threadIdx.x;
  const int64_t c = static_cast<int64_t>(blockIdx.y) * kGroups * kVector + t;
  if (c < width) {
    float total = 0.f;
#pragma unroll
    for (int lane = 0; lane < kLanes; ++lane) total += sums[lane][t];
    partials[static_cast<int64_t>(blockIdx.x) * width + c] = total;
  }
}

// Any width and alignment: a thread per column.
template <typename T, Act kAct>
__global__ void ColumnSumPartialScalarKernel(const T* in, ActivationInput<T> act, int64_t rows,
                                             int64_t width, float* partials) {
  __shared__ float sums[kLanes][kGroups];
  const int64_t c = static_cast<int64_t>(blockIdx.y) * kGroups + threadIdx.x;
  const int64_t per_slice = RowsPerSlice(rows);
  const int64_t first = static_cast<int64_t>(blockIdx.x) * per_slice;
  const int64_t last = min(first + per_slice, rows);
  float acc = 0.f;
  if (c < width) {
    for (int64_t r = first + threadIdx.y; r < last; r += kLanes) {
      const int64_t i = r * width + c;
      if constexpr (kAct == Act::kNone) {
        acc += ToFloat(in[i]);
      } else {
        const T d = FromFloat<T>(ActivationGrad<kAct>(ToFloat(in[i]), ToFloat(act.saved[i])));
        act.dpre[i] = d;
        acc += ToFloat(d);
      }
    }
  }
  sums[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && c < width) {
    for (int lane = 1; lane < kLanes; ++lane) acc += sums[lane][threadIdx.x];
    partials[static_cast<int64_t>(blockIdx.x) * width + c] = acc;
  }
}

// Sums the slices' partials per column. A block is 32 columns by 32 slice lanes: a lane
// adds every 32nd slice, then the lanes are added in a fixed order. (A thread per column
// looping over all slices was slow on GPT-2's many such sums: too few threads.)
constexpr int kFinishLanes = 32;

__global__ void ColumnSumFinishKernel(const float* partials, int64_t slices, int64_t width,
                                      float* out) {
  __shared__ float sums[kFinishLanes][kGroups + 1];
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kGroups + threadIdx.x;
  float acc = 0.f;
  if (c < width) {
#pragma unroll 4
    for (int64_t s = threadIdx.y; s < slices; s += kFinishLanes) acc += partials[s * width + c];
  }
  sums[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && c < width) {
    for (int lane = 1; lane < kFinishLanes; ++lane) acc += sums[lane][threadIdx.x];
    out[c] = acc;
  }
}

template <typename T, Act kAct>
void Launch(const T* in, ActivationInput<T> act, int64_t rows, int64_t width, float* out,
            float* partials, cudaStream_t s) {
  const int64_t slices = Slices(rows);
  const dim3 block(kGroups, kLanes);
  const bool vector = width % kVector == 0 && AlignedTo(in, 16) && AlignedTo(act.saved, 16) &&
                      AlignedTo(act.dpre, 16);
  if (vector) {
    const int64_t per_block = kGroups * kVector;
    const dim3 grid(static_cast<unsigned>(slices),
                    static_cast<unsigned>((width + per_block - 1) / per_block));
    ColumnSumPartialVectorKernel<T, kAct><<<grid, block, 0, s>>>(in, act, rows, width, partials);
  } else {
    const dim3 grid(static_cast<unsigned>(slices),
                    static_cast<unsigned>((width + kGroups - 1) / kGroups));
    ColumnSumPartialScalarKernel<T, kAct><<<grid, block, 0, s>>>(in, act, rows, width, partials);
  }
  ColumnSumFinishKernel<<<static_cast<unsigned>((width + kGroups - 1) / kGroups),
                          dim3(kGroups, kFinishLanes), 0, s>>>(partials, slices, width, out);
}

}  // namespace

int64_t ColumnSumScratch(int64_t rows, int64_t width) { return Slices(rows) * width; }

namespace {

// Every entry point: saved and dpre nullptr for plain sums.
template <typename T>
void LaunchTyped(const void* in, Act act, const void* saved, void* dpre, int64_t rows,
                 int64_t width, float* out, float* partials, cudaStream_t s) {
  const ActivationInput<T> input{static_cast<const T*>(saved), static_cast<T*>(dpre)};
  const T* typed = static_cast<const T*>(in);
  switch (act) {
    case Act::kNone:
      return Launch<T, Act::kNone>(typed, input, rows, width, out, partials, s);
    case Act::kGelu:
      return Launch<T, Act::kGelu>(typed, input, rows, width, out, partials, s);
    case Act::kRelu:
      return Launch<T, Act::kRelu>(typed, input, rows, width, out, partials, s);
  }
}

const char* Sums(const void* in, Act act, const void* saved, void* dpre, HalfType type,
                 int64_t rows, int64_t width, float* out, float* partials, void* stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  if (width == 0) return nullptr;
  if (rows == 0) {
    cudaMemsetAsync(out, 0, sizeof(float) * width, s);
  } else if (type == HalfType::kBFloat16) {
    LaunchTyped<__nv_bfloat16>(in, act, saved, dpre, rows, width, out, partials, s);
  } else {
    LaunchTyped<__half>(in, act, saved, dpre, rows, width, out, partials, s);
  }
  const cudaError_t error = cudaGetLastError();
  return error == cudaSuccess ? nullptr : cudaGetErrorString(error);
}

}  // namespace

const char* ColumnSums(const void* in, HalfType type, int64_t rows, int64_t width, float* out,
                       float* partials, void* stream) {
  return Sums(in, Act::kNone, nullptr, nullptr, type, rows, width, out, partials, stream);
}

const char* GeluBackwardColumnSums(const void* dy, const void* pre, HalfType type, int64_t rows,
                                   int64_t width, void* dpre, float* out, float* partials,
                                   void* stream) {
  return Sums(dy, Act::kGelu, pre, dpre, type, rows, width, out, partials, stream);
}

const char* ReluBackwardColumnSums(const void* dy, const void* relu_out, HalfType type,
                                   int64_t rows, int64_t width, void* dpre, float* out,
                                   float* partials, void* stream) {
  return Sums(dy, Act::kRelu, relu_out, dpre, type, rows, width, out, partials, stream);
}

}  // namespace stoke::worker::cuda
