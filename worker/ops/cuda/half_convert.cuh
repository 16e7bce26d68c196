// bf16/fp16 to and from fp32 by overload, so that one kernel template serves both types,
// and the vector loads, alignment test and warp sum the kernels share. Included by the .cu
// files of this folder only.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace stoke::worker::cuda {

// Whether p sits on a multiple of `bytes` (nullptr does): the vector paths' condition.
__host__ __device__ inline bool AlignedTo(const void* p, std::uintptr_t bytes) {
  return reinterpret_cast<std::uintptr_t>(p) % bytes == 0;
}

// The sum of v over a warp's 32 lanes, in every lane.
__device__ inline float WarpSum(float v) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

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

// N neighbouring 16-bit values (8 or 16 bytes, aligned to that) to and from fp32: the
// vectors the kernels here read and write per thread, 8 wide in the channels-last and
// column-sum kernels, 4 wide in the layer norm's rows.
template <int N>
struct HalfVectorBits;
template <>
struct HalfVectorBits<4> {
  using Type = uint2;
};
template <>
struct HalfVectorBits<8> {
  using Type = uint4;
};

template <typename T, int N>
__device__ inline void LoadVector(const T* p, float (&v)[N]) {
  using Bits = typename HalfVectorBits<N>::Type;
  const Bits bits = *reinterpret_cast<const Bits*>(p);
  const T* h = reinterpret_cast<const T*>(&bits);
#pragma unroll
  for (int k = 0; k < N; ++k) v[k] = ToFloat(h[k]);
}

template <typename T, int N>
__device__ inline void StoreVector(T* p, const float (&v)[N]) {
  using Bits = typename HalfVectorBits<N>::Type;
  Bits bits;
  T* h = reinterpret_cast<T*>(&bits);
#pragma unroll
  for (int k = 0; k < N; ++k) h[k] = FromFloat<T>(v[k]);
  *reinterpret_cast<Bits*>(p) = bits;
}

// Four neighbouring fp32 values (16 bytes, aligned), for kernels that mix fp32 and 16-bit
// rows under the same names.
__device__ inline void LoadVector(const float* p, float (&v)[4]) {
  const float4 q = *reinterpret_cast<const float4*>(p);
  v[0] = q.x;
  v[1] = q.y;
  v[2] = q.z;
  v[3] = q.w;
}

__device__ inline void StoreVector(float* p, const float (&v)[4]) {
  *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
}

}  // namespace stoke::worker::cuda
