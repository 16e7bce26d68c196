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

}  // namespace stoke::worker::cuda
