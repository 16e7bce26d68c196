#include "worker/ops/cuda/adamw_kernels.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "worker/ops/cuda/half_convert.cuh"

namespace stoke::worker::cuda {
namespace {

constexpr int kThreads = 256;
// Elements a block updates: 4 per thread per round, 4 rounds. Small enough that a model
// of half a million parameters still fills every multiprocessor.
constexpr int64_t kPerBlock = kThreads * 4 * 4;

// One launch's segments, and the first block of each (blocks never straddle two).
struct AdamWBatch {
  AdamWSegment segment[kMaxAdamWSegments];
  int64_t first_block[kMaxAdamWSegments + 1];
  int segments;
};

struct StepScalars {
  float decay;       // 1 - lr * weight_decay
  float step_size;   // lr / (1 - beta1^step)
  float root_bias2;  // sqrt(1 - beta2^step)
};

__device__ inline void Update(float& p, float g, float& m, float& v, const AdamWHyperparameters& h,
                              const StepScalars& s) {
  p *= s.decay;
  m = h.beta1 * m + (1.0f - h.beta1) * g;
  v = h.beta2 * v + (1.0f - h.beta2) * g * g;
  p -= s.step_size * m / (sqrtf(v) / s.root_bias2 + h.eps);
}

// The updated values of p[i .. i + N) into the segment's 16-bit copy, if it has one.
template <int N>
__device__ inline void WriteCopy(const AdamWSegment& seg, int64_t i, const float (&p)[N]) {
  if (seg.half_copy == nullptr) return;
  if (seg.half_type == HalfType::kBFloat16) {
    StoreVector(static_cast<__nv_bfloat16*>(seg.half_copy) + i, p);
  } else {
    StoreVector(static_cast<__half*>(seg.half_copy) + i, p);
  }
}

__device__ inline void WriteCopy(const AdamWSegment& seg, int64_t i, float p) {
  if (seg.half_copy == nullptr) return;
  if (seg.half_type == HalfType::kBFloat16) {
    static_cast<__nv_bfloat16*>(seg.half_copy)[i] = FromFloat<__nv_bfloat16>(p);
  } else {
    static_cast<__half*>(seg.half_copy)[i] = FromFloat<__half>(p);
  }
}

__global__ void __launch_bounds__(kThreads)
    AdamWKernel(AdamWBatch batch, const float* lr, const float* step, const float* found_inf,
                AdamWHyperparameters hyper) {
  if (found_inf != nullptr && *found_inf != 0.0f) return;
  int s = 0;
  while (s + 1 < batch.segments && batch.first_block[s + 1] <= blockIdx.x) ++s;
  const AdamWSegment& seg = batch.segment[s];
  const float rate = *lr;
  const float t = *step;
  StepScalars scalars;
  scalars.decay = 1.0f - rate * hyper.weight_decay;
  scalars.step_size = rate / (1.0f - powf(hyper.beta1, t));
  scalars.root_bias2 = sqrtf(1.0f - powf(hyper.beta2, t));
  const int64_t begin = (static_cast<int64_t>(blockIdx.x) - batch.first_block[s]) * kPerBlock;
  const int64_t end = min(begin + kPerBlock, seg.count);
  int64_t scalar_from = begin;
  if (AlignedTo(seg.param, 16) && AlignedTo(seg.grad, 16) && AlignedTo(seg.exp_avg, 16) &&
      AlignedTo(seg.exp_avg_sq, 16) && AlignedTo(seg.half_copy, 16)) {
    const int64_t vector_end = begin + (end - begin) / 4 * 4;
    for (int64_t i = begin + threadIdx.x * 4; i < vector_end; i += kThreads * 4) {
      float p[4], g[4], m[4], v[4];
      LoadVector(seg.param + i, p);
      LoadVector(seg.grad + i, g);
      LoadVector(seg.exp_avg + i, m);
      LoadVector(seg.exp_avg_sq + i, v);
#pragma unroll
      for (int k = 0; k < 4; ++k) Update(p[k], g[k], m[k], v[k], hyper, scalars);
      StoreVector(seg.param + i, p);
      StoreVector(seg.exp_avg + i, m);
      StoreVector(seg.exp_avg_sq + i, v);
      WriteCopy(seg, i, p);
    }
    scalar_from = vector_end;
  }
  for (int64_t i = scalar_from + threadIdx.x; i < end; i += kThreads) {
    Update(seg.param[i], seg.grad[i], seg.exp_avg[i], seg.exp_avg_sq[i], hyper, scalars);
    WriteCopy(seg, i, seg.param[i]);
  }
}

}  // namespace

const char* AdamWStep(const AdamWSegment* segments, int count, const float* lr, const float* step,
                      const float* found_inf, const AdamWHyperparameters& hyper, void* stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  for (int first = 0; first < count; first += kMaxAdamWSegments) {
    AdamWBatch batch{};
    batch.segments = std::min(kMaxAdamWSegments, count - first);
    int64_t blocks = 0;
    for (int k = 0; k < batch.segments; ++k) {
      batch.segment[k] = segments[first + k];
      batch.first_block[k] = blocks;
      blocks += std::max<int64_t>(1, (batch.segment[k].count + kPerBlock - 1) / kPerBlock);
    }
    batch.first_block[batch.segments] = blocks;
    AdamWKernel<<<static_cast<unsigned>(blocks), kThreads, 0, s>>>(batch, lr, step, found_inf,
                                                                   hyper);
  }
  const cudaError_t error = cudaGetLastError();
  return error == cudaSuccess ? nullptr : cudaGetErrorString(error);
}

}  // namespace stoke::worker::cuda
