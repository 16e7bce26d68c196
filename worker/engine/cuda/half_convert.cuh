// bf16/fp16 to and from fp32 by overload, so that one kernel template serves both types.
// Device code only: included by the .cu files of this folder.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace stoke::worker::cuda {

__device__ inline float ToFloat(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ inline float ToFloat(__half v) { return __half2float(v); }

template <typename T>
__device__ inline T FromFloat(float v);
template <>
__device__ inline __nv_bfloat16 FromFloat<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}
template <>
__device__ inline __half FromFloat<__half>(float v) {
  return __float2half_rn(v);
}

// Eight neighbouring 16-bit values (16 bytes, aligned) to and from fp32: the vector the
// channels-last kernels read and write per thread.
template <typename T>
__device__ inline void LoadVector8(const T* p, float (&v)[8]) {
  const uint4 bits = *reinterpret_cast<const uint4*>(p);
  const T* h = reinterpret_cast<const T*>(&bits);
#pragma unroll
  for (int k = 0; k < 8; ++k) v[k] = ToFloat(h[k]);
}

template <typename T>
__device__ inline void StoreVector8(T* p, const float (&v)[8]) {
  uint4 bits;
  T* h = reinterpret_cast<T*>(&bits);
#pragma unroll
  for (int k = 0; k < 8; ++k) h[k] = FromFloat<T>(v[k]);
  *reinterpret_cast<uint4*>(p) = bits;
}

}  // namespace stoke::worker::cuda
