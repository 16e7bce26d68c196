// Layer norm kernels that hold a row in registers: for rows up to kMaxRowWidth wide whose
// width is a multiple of 4 (a transformer's: GPT-2's 768). A warp reads its row once, in
// 16-byte (fp32) and 8-byte (bf16/fp16) vectors, and computes everything from registers.
// The generic kernels in layer_norm_kernels.cu read element by element and come back to
// the row for each pass; here backward is two kernels instead of three (the figures for
// GPT-2 small are in BENCHMARKS.md).
//
// Backward also sums gamma's and beta's gradients while it has the row: each block
// sums its slice of kRowSliceRows rows into partials [slice][2][width], in a fixed order
// (LayerNormParamGradSlicesKernel adds the slices), so dy and x are read once, not twice.
//
// Device code only: included by layer_norm_kernels.cu.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "worker/ops/cuda/half_convert.cuh"

namespace stoke::worker::cuda {
namespace {

constexpr int kMaxRowWidth = 1024;  // 8 vectors of 4 per lane
constexpr int kRowWarps = 4;        // rows (forward) or row lanes (backward) per block
constexpr int64_t kRowSliceRows = 32;

// The first column of a lane's k-th vector: lanes take neighbouring vectors, so a warp's
// load of one k is 512 (fp32) or 256 (16-bit) contiguous bytes.
__device__ inline int VectorColumn(int k) { return (static_cast<int>(threadIdx.x) + 32 * k) * 4; }

// Same contract as LayerNormForwardKernel; V = ceil(width / 128) vectors per lane.
template <typename T, int V>
__global__ void __launch_bounds__(32 * kRowWarps)
    LayerNormForwardRowKernel(const float* x, const T* branch, float* sum_out, const float* gamma,
                              const float* beta, int64_t rows, int width, float eps, T* y,
                              float* mean_out, float* rstd_out) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowWarps + threadIdx.y;
  if (row >= rows) return;
  const int64_t base = row * width;
  float v[V][4];
  float total = 0.f;
#pragma unroll
  for (int k = 0; k < V; ++k) {
    const int c = VectorColumn(k);
    if (c >= width) continue;
    LoadVector(x + base + c, v[k]);
    if (branch != nullptr) {
      float b[4];
      LoadVector(branch + base + c, b);
#pragma unroll
      for (int q = 0; q < 4; ++q) v[k][q] += b[q];
      StoreVector(sum_out + base + c, v[k]);
    }
#pragma unroll
    for (int q = 0; q < 4; ++q) total += v[k][q];
  }
  const float inv_width = 1.f / static_cast<float>(width);
  const float mean = WarpSum(total) * inv_width;
  // Variance around the mean from the registers: no E[x^2] - E[x]^2 cancellation.
  float squares = 0.f;
#pragma unroll
  for (int k = 0; k < V; ++k) {
    if (VectorColumn(k) >= width) continue;
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const float d = v[k][q] - mean;
      squares += d * d;
    }
  }
  const float rstd = rsqrtf(WarpSum(squares) * inv_width + eps);
#pragma unroll
  for (int k = 0; k < V; ++k) {
    const int c = VectorColumn(k);
    if (c >= width) continue;
    float g[4];
    float b[4];
    LoadVector(gamma + c, g);
    LoadVector(beta + c, b);
#pragma unroll
    for (int q = 0; q < 4; ++q) v[k][q] = (v[k][q] - mean) * rstd * g[q] + b[q];
    StoreVector(y + base + c, v[k]);
  }
  if (threadIdx.x == 0) {
    mean_out[row] = mean;
    rstd_out[row] = rstd;
  }
}

// LayerNormInputGradKernel's and LayerNormParamGradPartialKernel's work in one pass: block
// b takes rows [b * kRowSliceRows, +kRowSliceRows), its warps every kRowWarps-th of them.
// Each lane keeps its columns' gamma and beta sums in shared memory rather than
// registers, so that four blocks fit an SM (128 registers a thread) and GPT-2's 512
// blocks run in one wave on an H100/H200-sized GPU.
template <typename T, int V>
__global__ void __launch_bounds__(32 * kRowWarps, 4)
    LayerNormBackwardRowKernel(const T* dy, const float* x, const float* gamma, const float* mean,
                               const float* rstd, const float* residual_grad, int64_t rows,
                               int width, float* dx, T* dx_low, float* partials) {
  // [warp][gamma, beta][column]
  __shared__ float sums[kRowWarps][2][V * 128];
  float(&dgamma)[V * 128] = sums[threadIdx.y][0];
  float(&dbeta)[V * 128] = sums[threadIdx.y][1];
#pragma unroll
  for (int k = 0; k < V; ++k) {
    const float zero[4] = {0.f, 0.f, 0.f, 0.f};
    StoreVector(dgamma + VectorColumn(k), zero);
    StoreVector(dbeta + VectorColumn(k), zero);
  }
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kRowSliceRows;
  const int64_t last = first + kRowSliceRows < rows ? first + kRowSliceRows : rows;
  const float inv_width = 1.f / static_cast<float>(width);
  for (int64_t row = first + threadIdx.y; row < last; row += kRowWarps) {
    const int64_t base = row * width;
    const float mu = mean[row];
    const float rs = rstd[row];
    float g[V][4];     // dy * gamma
    float xhat[V][4];  // (x - mean) * rstd
    float sum_g = 0.f;
    float sum_gx = 0.f;
#pragma unroll
    for (int k = 0; k < V; ++k) {
      const int c = VectorColumn(k);
      if (c >= width) continue;
      float gam[4];
      float sg[4];
      float sb[4];
      LoadVector(dy + base + c, g[k]);
      LoadVector(x + base + c, xhat[k]);
      LoadVector(gamma + c, gam);
      LoadVector(dgamma + c, sg);
      LoadVector(dbeta + c, sb);
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        xhat[k][q] = (xhat[k][q] - mu) * rs;
        sg[q] += g[k][q] * xhat[k][q];
        sb[q] += g[k][q];
        g[k][q] *= gam[q];
        sum_g += g[k][q];
        sum_gx += g[k][q] * xhat[k][q];
      }
      StoreVector(dgamma + c, sg);
      StoreVector(dbeta + c, sb);
    }
    const float mean_g = WarpSum(sum_g) * inv_width;
    const float mean_gx = WarpSum(sum_gx) * inv_width;
#pragma unroll
    for (int k = 0; k < V; ++k) {
      const int c = VectorColumn(k);
      if (c >= width) continue;
      float out[4];
#pragma unroll
      for (int q = 0; q < 4; ++q) out[q] = rs * (g[k][q] - mean_g - xhat[k][q] * mean_gx);
      if (residual_grad != nullptr) {
        float r[4];
        LoadVector(residual_grad + base + c, r);
#pragma unroll
        for (int q = 0; q < 4; ++q) out[q] += r[q];
      }
      StoreVector(dx + base + c, out);
      if (dx_low != nullptr) StoreVector(dx_low + base + c, out);
    }
  }
  __syncthreads();
  // The block's sums over its warps in a fixed order.
  float* out = partials + static_cast<int64_t>(blockIdx.x) * 2 * width;
  for (int c = static_cast<int>(threadIdx.y * 32 + threadIdx.x); c < width; c += 32 * kRowWarps) {
    float g = 0.f;
    float b = 0.f;
#pragma unroll
    for (int w = 0; w < kRowWarps; ++w) {
      g += sums[w][0][c];
      b += sums[w][1][c];
    }
    out[c] = g;
    out[width + c] = b;
  }
}

// dgamma, dbeta = the sums of partials [slices][2][width] over slices. A block takes 32
// columns; its kSumLanes row lanes each add every kSumLanes-th slice, and the lanes'
// totals are added in a fixed order: enough loads in flight for the hundreds of slices
// the row kernel leaves.
constexpr int kSumLanes = 16;

__global__ void __launch_bounds__(32 * kSumLanes)
    LayerNormParamGradSlicesKernel(const float* partials, int64_t slices, int64_t width,
                                   float* dgamma, float* dbeta) {
  __shared__ float lane_sums[2][kSumLanes][32];
  const int64_t c = static_cast<int64_t>(blockIdx.x) * 32 + threadIdx.x;
  float g = 0.f;
  float b = 0.f;
  if (c < width) {
    for (int64_t s = threadIdx.y; s < slices; s += kSumLanes) {
      g += partials[(s * 2) * width + c];
      b += partials[(s * 2 + 1) * width + c];
    }
  }
  lane_sums[0][threadIdx.y][threadIdx.x] = g;
  lane_sums[1][threadIdx.y][threadIdx.x] = b;
  __syncthreads();
  if (threadIdx.y != 0 || c >= width) return;
  for (int lane = 1; lane < kSumLanes; ++lane) {
    g += lane_sums[0][lane][threadIdx.x];
    b += lane_sums[1][lane][threadIdx.x];
  }
  dgamma[c] = g;
  dbeta[c] = b;
}

}  // namespace
}  // namespace stoke::worker::cuda
