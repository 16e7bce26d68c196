// Why a GPU test of Stoke's own CUDA kernels cannot run here, or "" when it can: no CUDA
// device, or a build without nvcc (STOKE_WITH_CUDA_KERNELS 0), where the kernels are
// absent all together. Header-only: GPU tests use it as
//   if (const std::string why = WhyNoOwnKernels(); !why.empty()) GTEST_SKIP() << why;
#pragma once

#include <string>

#include "tests/support/require_cuda.h"

namespace stoke::testing {

inline std::string WhyNoOwnKernels() {
  if (std::string why = WhyTooFewCudaDevices(); !why.empty()) return why;
  if (STOKE_WITH_CUDA_KERNELS == 0) return "built without Stoke's CUDA kernels";
  return "";
}

}  // namespace stoke::testing
