// The first line of every GPU test of LibTorch code: skips where the NVIDIA driver reports
// no CUDA device (asked of the driver, not of torch), and fails where the driver reports
// one that this LibTorch cannot see (a CPU build on a GPU host tests nothing).
//   STOKE_SKIP_WITHOUT_CUDA();      // one device or more
//   STOKE_SKIP_WITHOUT_CUDA(2);     // at least two
// Header-only, for test files that already include torch.
#pragma once

#include <gtest/gtest.h>
#include <torch/cuda.h>

#include <string>

#include "tests/support/cuda_driver.h"

namespace stoke::testing {

// Why a test needing `wanted` CUDA devices cannot run here, or "" when it can. A LibTorch
// that sees fewer devices than the driver counts a failure, and is reason enough.
inline std::string WhyTooFewCudaDevices(int wanted = 1) {
  const int driver = CudaDevicesOnThisMachine();
  if (driver < wanted) {
    return driver == 0 ? WhyNoCudaDevice()
                       : "needs " + std::to_string(wanted) + " CUDA devices, the driver reports " +
                             std::to_string(driver);
  }
  const int torch_sees =
      torch::cuda::is_available() ? static_cast<int>(torch::cuda::device_count()) : 0;
  if (torch_sees < driver) {
    ADD_FAILURE() << "the driver reports " << driver << " CUDA devices, this LibTorch sees "
                  << torch_sees << " (a CPU build?)";
    return "LibTorch sees too few CUDA devices";
  }
  return "";
}

}  // namespace stoke::testing

#define STOKE_SKIP_WITHOUT_CUDA(...)                                                       \
  do {                                                                                     \
    if (const std::string stoke_why = ::stoke::testing::WhyTooFewCudaDevices(__VA_ARGS__); \
        !stoke_why.empty()) {                                                              \
      GTEST_SKIP() << stoke_why;                                                           \
    }                                                                                      \
  } while (false)
