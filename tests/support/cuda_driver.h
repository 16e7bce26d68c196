// Whether this machine has a CUDA device, asked of the NVIDIA driver itself (libcuda),
// never of a Stoke program: a GPU test skips only where the answer is no, so a Stoke
// program that crashes on a GPU host fails its test instead of skipping it.
#pragma once

#include <string>
#include <vector>

namespace stoke::testing {

// The number of CUDA devices the driver reports; 0 without a driver or a device.
int CudaDevicesOnThisMachine();

// Why a GPU test cannot run here ("no CUDA device: ..."), or "" when the driver reports one.
std::string WhyNoCudaDevice();

// Runs `argv` (a Stoke program asked about its devices): "" when it exited 0 and its output
// names `wanted`; otherwise what went wrong, naming the signal that ended it if one did.
std::string WhyProgramDoesNotSee(const std::vector<std::string>& argv, const std::string& wanted);

}  // namespace stoke::testing
