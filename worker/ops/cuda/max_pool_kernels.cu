#include "worker/ops/cuda/max_pool_kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "worker/ops/cuda/half_convert.cuh"

namespace stoke::worker::cuda {
namespace {

// A thread takes 8 neighbouring channels (16 bytes of activation, 8 bytes of taps) of
// one output position forward, of one input position backward.
constexpr int kVector = 8;
constexpr int kThreads = 256;

// Where thread i's vector lies in an NHWC tensor of `height` x `width` images: its image,
// row, column and first channel (vectors run fastest along the channels).
struct Spot {
  int64_t n, row, column, channel;
};

__device__ inline Spot SpotOf(int64_t i, int64_t channels, int64_t height, int64_t width) {
  const int64_t vectors = channels / kVector;
  const int64_t pixel = i / vectors;
  return {pixel / width / height, (pixel / width) % height, pixel % width, (i % vectors) * kVector};
}

// One output position's 8 channels: the window's largest (compared in fp32, which holds
// bf16 and fp16 exactly), in torch's order (rows, then columns) and with its rule for ties
// and NaN, and the tap it came from.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    MaxPoolForwardKernel(const T* __restrict__ x, PoolShape s, int64_t outputs, T* __restrict__ y,
                         uint8_t* __restrict__ taps) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= outputs) return;
  const Spot at = SpotOf(i, s.channels, s.out_height, s.out_width);
  const int64_t n = at.n, oh = at.row, ow = at.column, c0 = at.channel;
  const int64_t h0 = oh * s.stride - s.padding;
  const int64_t w0 = ow * s.stride - s.padding;
  const int64_t h_begin = h0 < 0 ? 0 : h0;
  const int64_t w_begin = w0 < 0 ? 0 : w0;
  const int64_t h_end = min(h0 + s.kernel, s.height);
  const int64_t w_end = min(w0 + s.kernel, s.width);
  float best[kVector];
  int tap[kVector];
  const int first = static_cast<int>((h_begin - h0) * s.kernel + (w_begin - w0));
#pragma unroll
  for (int k = 0; k < kVector; ++k) {
    best[k] = -INFINITY;
    tap[k] = first;
  }
  for (int64_t h = h_begin; h < h_end; ++h) {
    for (int64_t w = w_begin; w < w_end; ++w) {
      float v[kVector];
      LoadVector(x + ((n * s.height + h) * s.width + w) * s.channels + c0, v);
      const int t = static_cast<int>((h - h0) * s.kernel + (w - w0));
#pragma unroll
      for (int k = 0; k < kVector; ++k) {
        if (v[k] > best[k] || isnan(v[k])) {
          best[k] = v[k];
          tap[k] = t;
        }
      }
    }
  }
  StoreVector(y + i * kVector, best);
  uint2 packed;
  uint8_t* bytes = reinterpret_cast<uint8_t*>(&packed);
#pragma unroll
  for (int k = 0; k < kVector; ++k) bytes[k] = static_cast<uint8_t>(tap[k]);
  *reinterpret_cast<uint2*>(taps + i * kVector) = packed;
}

// One input position's 8 channels: the sum of the gradients of the outputs whose
// windows hold it and took it (a gather: each input is written once, no atomics).
template <typename T>
__global__ void __launch_bounds__(kThreads)
    MaxPoolBackwardKernel(const T* __restrict__ dy, const uint8_t* __restrict__ taps, PoolShape s,
                          int64_t inputs, T* __restrict__ dx) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= inputs) return;
  const Spot at = SpotOf(i, s.channels, s.height, s.width);
  const int64_t n = at.n, h = at.row, w = at.column, c0 = at.channel;
  // Outputs oh whose window [oh * stride - padding, + kernel) holds h.
  const int64_t hp = h + s.padding, wp = w + s.padding;
  const int64_t oh_begin = hp < s.kernel ? 0 : (hp - s.kernel) / s.stride + 1;
  const int64_t ow_begin = wp < s.kernel ? 0 : (wp - s.kernel) / s.stride + 1;
  const int64_t oh_end = min(hp / s.stride + 1, s.out_height);
  const int64_t ow_end = min(wp / s.stride + 1, s.out_width);
  float sum[kVector] = {};
  for (int64_t oh = oh_begin; oh < oh_end; ++oh) {
    for (int64_t ow = ow_begin; ow < ow_end; ++ow) {
      const int64_t at = ((n * s.out_height + oh) * s.out_width + ow) * s.channels + c0;
      const uint2 packed = *reinterpret_cast<const uint2*>(taps + at);
      const uint8_t* took = reinterpret_cast<const uint8_t*>(&packed);
      const int t = static_cast<int>((hp - oh * s.stride) * s.kernel + (wp - ow * s.stride));
      float g[kVector];
      LoadVector(dy + at, g);
#pragma unroll
      for (int k = 0; k < kVector; ++k) {
        if (took[k] == t) sum[k] += g[k];
      }
    }
  }
  StoreVector(dx + i * kVector, sum);
}

const char* LastError() {
  const cudaError_t error = cudaGetLastError();
  return error == cudaSuccess ? nullptr : cudaGetErrorString(error);
}

const char* CheckShape(const PoolShape& s) {
  if (s.channels < kVector || s.channels % kVector != 0) {
    return "max pool kernels need a multiple of 8 channels";
  }
  if (s.kernel < 1 || s.kernel * s.kernel > 255 || s.stride < 1 || s.padding < 0 ||
      2 * s.padding > s.kernel) {
    return "max pool kernels: window, stride or padding out of range";
  }
  return nullptr;
}

unsigned Blocks(int64_t threads) {
  return static_cast<unsigned>((threads + kThreads - 1) / kThreads);
}

}  // namespace

const char* MaxPoolForward(const void* x, HalfType type, const PoolShape& shape, void* y,
                           uint8_t* taps, void* stream) {
  if (const char* error = CheckShape(shape)) return error;
  const int64_t outputs =
      shape.batch * shape.out_height * shape.out_width * (shape.channels / kVector);
  if (outputs == 0) return nullptr;
  const auto s = static_cast<cudaStream_t>(stream);
  if (type == HalfType::kBFloat16) {
    MaxPoolForwardKernel<<<Blocks(outputs), kThreads, 0, s>>>(
        static_cast<const __nv_bfloat16*>(x), shape, outputs, static_cast<__nv_bfloat16*>(y), taps);
  } else {
    MaxPoolForwardKernel<<<Blocks(outputs), kThreads, 0, s>>>(
        static_cast<const __half*>(x), shape, outputs, static_cast<__half*>(y), taps);
  }
  return LastError();
}

const char* MaxPoolBackward(const void* dy, const uint8_t* taps, HalfType type,
                            const PoolShape& shape, void* dx, void* stream) {
  if (const char* error = CheckShape(shape)) return error;
  const int64_t inputs = shape.batch * shape.height * shape.width * (shape.channels / kVector);
  if (inputs == 0) return nullptr;
  const auto s = static_cast<cudaStream_t>(stream);
  if (type == HalfType::kBFloat16) {
    MaxPoolBackwardKernel<<<Blocks(inputs), kThreads, 0, s>>>(static_cast<const __nv_bfloat16*>(dy),
                                                              taps, shape, inputs,
                                                              static_cast<__nv_bfloat16*>(dx));
  } else {
    MaxPoolBackwardKernel<<<Blocks(inputs), kThreads, 0, s>>>(
        static_cast<const __half*>(dy), taps, shape, inputs, static_cast<__half*>(dx));
  }
  return LastError();
}

}  // namespace stoke::worker::cuda
