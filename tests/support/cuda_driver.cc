#include "tests/support/cuda_driver.h"

#include <dlfcn.h>

#include <csignal>
#include <cstring>

#include "tests/support/subprocess.h"

namespace stoke::testing {

int CudaDevicesOnThisMachine() {
  // The driver API, loaded at run time: tests link no CUDA library, and a machine without
  // the driver simply has no devices.
  void* driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (driver == nullptr) return 0;
  using Init = int (*)(unsigned);
  using DeviceGetCount = int (*)(int*);
  const auto init = reinterpret_cast<Init>(dlsym(driver, "cuInit"));
  const auto get_count = reinterpret_cast<DeviceGetCount>(dlsym(driver, "cuDeviceGetCount"));
  int count = 0;
  if (init == nullptr || get_count == nullptr || init(0) != 0 || get_count(&count) != 0) count = 0;
  // Left loaded: unloading the driver library in a process that may use CUDA later is unsafe.
  return count;
}

std::string WhyNoCudaDevice() {
  if (CudaDevicesOnThisMachine() > 0) return "";
  return "no CUDA device: the NVIDIA driver (libcuda.so.1) is absent or reports none";
}

std::string WhyProgramDoesNotSee(const std::vector<std::string>& argv, const std::string& wanted) {
  const CommandResult result = RunCommand(argv);
  std::string command;
  for (const auto& arg : argv) command += (command.empty() ? "" : " ") + arg;
  if (result.exit_code > 128) {
    const int signal = result.exit_code - 128;
    const char* name = sigabbrev_np(signal);
    return command + " died of signal " + std::to_string(signal) + " (SIG" +
           (name != nullptr ? name : "?") + "): " + result.err;
  }
  if (result.exit_code != 0) {
    return command + " exited " + std::to_string(result.exit_code) + ": " + result.err;
  }
  if (result.out.find(wanted) == std::string::npos) {
    return command + " does not list " + wanted +
           " although the driver reports a CUDA device: " + result.out;
  }
  return "";
}

}  // namespace stoke::testing
