#include "worker/ops/cuda/cast_kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "worker/ops/cuda/half_convert.cuh"

namespace stoke::worker::cuda {
namespace {

constexpr int kThreads = 256;
// Elements a block casts: 8 per thread per round, 4 rounds.
constexpr int64_t kPerBlock = kThreads * 8 * 4;

// One launch's segments, and the first block of each (blocks never straddle two).
struct CastBatch {
  const float* source[kMaxCastSegments];
  int64_t count[kMaxCastSegments];
  int64_t offset[kMaxCastSegments];
  int64_t first_block[kMaxCastSegments + 1];
  int segments;
};

template <typename T>
__global__ void __launch_bounds__(kThreads) CastKernel(CastBatch batch, T* out) {
  int s = 0;
  while (s + 1 < batch.segments && batch.first_block[s + 1] <= blockIdx.x) ++s;
  const float* source = batch.source[s];
  T* target = out + batch.offset[s];
  const int64_t begin = (static_cast<int64_t>(blockIdx.x) - batch.first_block[s]) * kPerBlock;
  const int64_t end = min(begin + kPerBlock, batch.count[s]);
  // Two 16-byte loads and one 16-byte store per 8 elements where the source allows
  // (the target's offsets are multiples of 8); the rest one by one.
  int64_t scalar_from = begin;
  if (AlignedTo(source, 16)) {
    const int64_t vector_end = begin + (end - begin) / 8 * 8;
    for (int64_t i = begin + threadIdx.x * 8; i < vector_end; i += kThreads * 8) {
      float v[8];
      float(&low)[4] = *reinterpret_cast<float(*)[4]>(&v[0]);
      float(&high)[4] = *reinterpret_cast<float(*)[4]>(&v[4]);
      LoadVector(source + i, low);
      LoadVector(source + i + 4, high);
      StoreVector(target + i, v);
    }
    scalar_from = vector_end;
  }
  for (int64_t i = scalar_from + threadIdx.x; i < end; i += kThreads) {
    target[i] = FromFloat<T>(source[i]);
  }
}

template <typename T>
void Launch(const CastSegment* segments, int count, T* out, cudaStream_t s) {
  for (int first = 0; first < count; first += kMaxCastSegments) {
    CastBatch batch{};
    batch.segments = std::min(kMaxCastSegments, count - first);
    int64_t blocks = 0;
    for (int k = 0; k < batch.segments; ++k) {
      const CastSegment& segment = segments[first + k];
      batch.source[k] = segment.source;
      batch.count[k] = segment.count;
      batch.offset[k] = segment.offset;
      batch.first_block[k] = blocks;
      blocks += std::max<int64_t>(1, (segment.count + kPerBlock - 1) / kPerBlock);
    }
    batch.first_block[batch.segments] = blocks;
    CastKernel<<<static_cast<unsigned>(blocks), kThreads, 0, s>>>(batch, out);
  }
}

}  // namespace

const char* CastToHalf(const CastSegment* segments, int count, void* out, HalfType type,
                       void* stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  if (type == HalfType::kBFloat16) {
    Launch(segments, count, static_cast<__nv_bfloat16*>(out), s);
  } else {
    Launch(segments, count, static_cast<__half*>(out), s);
  }
  const cudaError_t error = cudaGetLastError();
  return error == cudaSuccess ? nullptr : cudaGetErrorString(error);
}

}  // namespace stoke::worker::cuda
