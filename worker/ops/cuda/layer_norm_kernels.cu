#include "worker/ops/cuda/layer_norm_kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>

#include "worker/ops/cuda/half_convert.cuh"
#include "worker/ops/cuda/layer_norm_row_kernels.cuh"

namespace stoke::worker::cuda {
namespace {

// A warp per row: rows of a transformer's width (hundreds to a few thousand) fit a warp's
// 32 lanes with a few elements each, and the row's reductions stay in shuffles.
constexpr int kRowsPerBlock = 4;
// Column tiles for gamma's and beta's gradients: 32 columns by 8 row lanes per block,
// each block summing one slice of the rows.
constexpr int kColumnTile = 32;
constexpr int kRowLanes = 8;
constexpr int64_t kRowsPerSlice = 512;

// Mean and variance in two passes over the row (the second from L1): no cancellation
// from E[x^2] - E[x]^2 when a row's mean is large against its spread. With a branch, the
// row normalised is x + branch, written to `sum` first (each lane rereads only what it
// wrote itself).
template <typename T>
__global__ void LayerNormForwardKernel(const float* x, const T* branch, float* sum_out,
                                       const float* gamma, const float* beta, int64_t rows,
                                       int64_t width, float eps, T* y, float* mean_out,
                                       float* rstd_out) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.y;
  if (row >= rows) return;
  const float* xr = x + row * width;
  float sum = 0.f;
  if (branch != nullptr) {
    const T* br = branch + row * width;
    float* sr = sum_out + row * width;
    for (int64_t c = threadIdx.x; c < width; c += 32) {
      const float v = xr[c] + ToFloat(br[c]);
      sr[c] = v;
      sum += v;
    }
    xr = sr;
  } else {
    for (int64_t c = threadIdx.x; c < width; c += 32) sum += xr[c];
  }
  const float mean = WarpSum(sum) / static_cast<float>(width);
  float squares = 0.f;
  for (int64_t c = threadIdx.x; c < width; c += 32) {
    const float d = xr[c] - mean;
    squares += d * d;
  }
  const float rstd = rsqrtf(WarpSum(squares) / static_cast<float>(width) + eps);
  T* yr = y + row * width;
  for (int64_t c = threadIdx.x; c < width; c += 32) {
    yr[c] = FromFloat<T>((xr[c] - mean) * rstd * gamma[c] + beta[c]);
  }
  if (threadIdx.x == 0) {
    mean_out[row] = mean;
    rstd_out[row] = rstd;
  }
}

// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * gamma; plus the gradient
// the residual stream brings from further on, when given, and a low-precision copy for
// the branch that was added into the stream, when asked for.
template <typename T>
__global__ void LayerNormInputGradKernel(const T* dy, const float* x, const float* gamma,
                                         const float* mean, const float* rstd,
                                         const float* residual_grad, int64_t rows, int64_t width,
                                         float* dx, T* dx_low) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.y;
  if (row >= rows) return;
  const T* dyr = dy + row * width;
  const float* xr = x + row * width;
  const float mu = mean[row];
  const float rs = rstd[row];
  float sum_g = 0.f;
  float sum_gx = 0.f;
  for (int64_t c = threadIdx.x; c < width; c += 32) {
    const float g = ToFloat(dyr[c]) * gamma[c];
    sum_g += g;
    sum_gx += g * (xr[c] - mu) * rs;
  }
  const float inv_width = 1.f / static_cast<float>(width);
  const float mean_g = WarpSum(sum_g) * inv_width;
  const float mean_gx = WarpSum(sum_gx) * inv_width;
  float* dxr = dx + row * width;
  const float* rgr = residual_grad != nullptr ? residual_grad + row * width : nullptr;
  T* lowr = dx_low != nullptr ? dx_low + row * width : nullptr;
  for (int64_t c = threadIdx.x; c < width; c += 32) {
    const float xhat = (xr[c] - mu) * rs;
    float v = rs * (ToFloat(dyr[c]) * gamma[c] - mean_g - xhat * mean_gx);
    if (rgr != nullptr) v += rgr[c];
    dxr[c] = v;
    if (lowr != nullptr) lowr[c] = FromFloat<T>(v);
  }
}

// Per slice of kRowsPerSlice rows and tile of kColumnTile columns: the slice's sums of
// dy * xhat and dy, into partials [slices][2][width]. Summed over slices in a fixed order
// by the next kernel, so the result does not depend on scheduling.
template <typename T>
__global__ void LayerNormParamGradPartialKernel(const T* dy, const float* x, const float* mean,
                                                const float* rstd, int64_t rows, int64_t width,
                                                float* partials) {
  __shared__ float gamma_sums[kRowLanes][kColumnTile];
  __shared__ float beta_sums[kRowLanes][kColumnTile];
  const int64_t c = static_cast<int64_t>(blockIdx.y) * kColumnTile + threadIdx.x;
  const int64_t slice = blockIdx.x;
  const int64_t first = slice * kRowsPerSlice;
  const int64_t last = first + kRowsPerSlice < rows ? first + kRowsPerSlice : rows;
  float dgamma = 0.f;
  float dbeta = 0.f;
  if (c < width) {
    for (int64_t r = first + threadIdx.y; r < last; r += kRowLanes) {
      const float g = ToFloat(dy[r * width + c]);
      dgamma += g * (x[r * width + c] - mean[r]) * rstd[r];
      dbeta += g;
    }
  }
  gamma_sums[threadIdx.y][threadIdx.x] = dgamma;
  beta_sums[threadIdx.y][threadIdx.x] = dbeta;
  __syncthreads();
  if (threadIdx.y == 0 && c < width) {
    for (int k = 1; k < kRowLanes; ++k) {
      dgamma += gamma_sums[k][threadIdx.x];
      dbeta += beta_sums[k][threadIdx.x];
    }
    partials[(slice * 2) * width + c] = dgamma;
    partials[(slice * 2 + 1) * width + c] = dbeta;
  }
}

__global__ void LayerNormParamGradSumKernel(const float* partials, int64_t slices, int64_t width,
                                            float* dgamma, float* dbeta) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= width) return;
  float g = 0.f;
  float b = 0.f;
  for (int64_t s = 0; s < slices; ++s) {
    g += partials[(s * 2) * width + c];
    b += partials[(s * 2 + 1) * width + c];
  }
  dgamma[c] = g;
  dbeta[c] = b;
}

const char* LastError() {
  const cudaError_t error = cudaGetLastError();
  return error == cudaSuccess ? nullptr : cudaGetErrorString(error);
}

int64_t Slices(int64_t rows) {
  return std::max<int64_t>(1, (rows + kRowsPerSlice - 1) / kRowsPerSlice);
}

// Whether the register-resident kernels (layer_norm_row_kernels.cuh) take rows of this
// width: a multiple of 4 up to kMaxRowWidth, fp32 arrays on 16 bytes and 16-bit ones on 8
// (nullptr counts as aligned).
bool RowKernelsApply(int64_t width, std::initializer_list<const void*> fp32,
                     std::initializer_list<const void*> half) {
  if (width % 4 != 0 || width > kMaxRowWidth) return false;
  for (const void* p : fp32) {
    if (!AlignedTo(p, 16)) return false;
  }
  for (const void* p : half) {
    if (!AlignedTo(p, 8)) return false;
  }
  return true;
}

// The instantiation for `vectors` = ceil(width / 128) vectors of 4 per lane.
template <typename T, int V = 1>
void LaunchForwardRows(int vectors, const float* x, const T* branch, float* sum, const float* gamma,
                       const float* beta, int64_t rows, int width, float eps, T* y, float* mean,
                       float* rstd, cudaStream_t s) {
  if constexpr (V < kMaxRowWidth / 128) {
    if (vectors > V) {
      LaunchForwardRows<T, V + 1>(vectors, x, branch, sum, gamma, beta, rows, width, eps, y, mean,
                                  rstd, s);
      return;
    }
  }
  const auto blocks = static_cast<unsigned>((rows + kRowWarps - 1) / kRowWarps);
  LayerNormForwardRowKernel<T, V><<<blocks, dim3(32, kRowWarps), 0, s>>>(
      x, branch, sum, gamma, beta, rows, width, eps, y, mean, rstd);
}

template <typename T, int V = 1>
void LaunchBackwardRows(int vectors, const T* dy, const float* x, const float* gamma,
                        const float* mean, const float* rstd, const float* residual_grad,
                        int64_t rows, int width, float* dx, T* dx_low, float* partials,
                        cudaStream_t s) {
  if constexpr (V < kMaxRowWidth / 128) {
    if (vectors > V) {
      LaunchBackwardRows<T, V + 1>(vectors, dy, x, gamma, mean, rstd, residual_grad, rows, width,
                                   dx, dx_low, partials, s);
      return;
    }
  }
  const auto blocks = static_cast<unsigned>((rows + kRowSliceRows - 1) / kRowSliceRows);
  LayerNormBackwardRowKernel<T, V><<<blocks, dim3(32, kRowWarps), 0, s>>>(
      dy, x, gamma, mean, rstd, residual_grad, rows, width, dx, dx_low, partials);
}

int VectorsPerLane(int64_t width) { return static_cast<int>((width + 127) / 128); }

template <typename T>
void LaunchForward(const float* x, const T* branch, float* sum, const float* gamma,
                   const float* beta, int64_t rows, int64_t width, float eps, T* y, float* mean,
                   float* rstd, cudaStream_t s) {
  if (RowKernelsApply(width, {x, sum, gamma, beta}, {branch, y})) {
    LaunchForwardRows(VectorsPerLane(width), x, branch, sum, gamma, beta, rows,
                      static_cast<int>(width), eps, y, mean, rstd, s);
    return;
  }
  const dim3 block(32, kRowsPerBlock);
  const auto blocks = static_cast<unsigned>((rows + kRowsPerBlock - 1) / kRowsPerBlock);
  LayerNormForwardKernel<<<blocks, block, 0, s>>>(x, branch, sum, gamma, beta, rows, width, eps, y,
                                                  mean, rstd);
}

template <typename T>
void LaunchBackward(const T* dy, const float* x, const float* gamma, const float* mean,
                    const float* rstd, const float* residual_grad, int64_t rows, int64_t width,
                    float* dx, T* dx_low, float* dgamma, float* dbeta, float* partials,
                    cudaStream_t s) {
  if (RowKernelsApply(width, {x, gamma, residual_grad, dx}, {dy, dx_low})) {
    LaunchBackwardRows(VectorsPerLane(width), dy, x, gamma, mean, rstd, residual_grad, rows,
                       static_cast<int>(width), dx, dx_low, partials, s);
    LayerNormParamGradSlicesKernel<<<static_cast<unsigned>((width + 31) / 32), dim3(32, kSumLanes),
                                     0, s>>>(partials, (rows + kRowSliceRows - 1) / kRowSliceRows,
                                             width, dgamma, dbeta);
  } else {
    const dim3 row_block(32, kRowsPerBlock);
    const auto row_blocks = static_cast<unsigned>((rows + kRowsPerBlock - 1) / kRowsPerBlock);
    LayerNormInputGradKernel<<<row_blocks, row_block, 0, s>>>(
        dy, x, gamma, mean, rstd, residual_grad, rows, width, dx, dx_low);
    const dim3 tile_block(kColumnTile, kRowLanes);
    // Slices along x, which allows 2^31 - 1 of them (y stops at 65,535).
    const dim3 tiles(static_cast<unsigned>(Slices(rows)),
                     static_cast<unsigned>((width + kColumnTile - 1) / kColumnTile));
    LayerNormParamGradPartialKernel<<<tiles, tile_block, 0, s>>>(dy, x, mean, rstd, rows, width,
                                                                 partials);
    LayerNormParamGradSumKernel<<<static_cast<unsigned>((width + 255) / 256), 256, 0, s>>>(
        partials, Slices(rows), width, dgamma, dbeta);
  }
}

}  // namespace

const char* LayerNormForward(const float* x, const void* branch, float* sum, const float* gamma,
                             const float* beta, int64_t rows, int64_t width, float eps, void* y,
                             HalfType out, float* mean, float* rstd, void* stream) {
  if (rows == 0) return nullptr;
  const auto s = static_cast<cudaStream_t>(stream);
  if (out == HalfType::kBFloat16) {
    LaunchForward(x, static_cast<const __nv_bfloat16*>(branch), sum, gamma, beta, rows, width, eps,
                  static_cast<__nv_bfloat16*>(y), mean, rstd, s);
  } else {
    LaunchForward(x, static_cast<const __half*>(branch), sum, gamma, beta, rows, width, eps,
                  static_cast<__half*>(y), mean, rstd, s);
  }
  return LastError();
}

int64_t LayerNormBackwardScratch(int64_t rows, int64_t width) {
  // Room for either route's slices (the row kernels' are the smaller, so more of them).
  const int64_t row_slices = (rows + kRowSliceRows - 1) / kRowSliceRows;
  return std::max(Slices(rows), row_slices) * 2 * width;
}

const char* LayerNormBackward(const void* dy, HalfType dy_type, const float* x, const float* gamma,
                              const float* mean, const float* rstd, const float* residual_grad,
                              int64_t rows, int64_t width, float* dx, void* dx_low, float* dgamma,
                              float* dbeta, float* partials, void* stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  if (rows == 0) {
    cudaMemsetAsync(dgamma, 0, sizeof(float) * width, s);
    cudaMemsetAsync(dbeta, 0, sizeof(float) * width, s);
    return LastError();
  }
  if (dy_type == HalfType::kBFloat16) {
    LaunchBackward(static_cast<const __nv_bfloat16*>(dy), x, gamma, mean, rstd, residual_grad, rows,
                   width, dx, static_cast<__nv_bfloat16*>(dx_low), dgamma, dbeta, partials, s);
  } else {
    LaunchBackward(static_cast<const __half*>(dy), x, gamma, mean, rstd, residual_grad, rows, width,
                   dx, static_cast<__half*>(dx_low), dgamma, dbeta, partials, s);
  }
  return LastError();
}

}  // namespace stoke::worker::cuda
