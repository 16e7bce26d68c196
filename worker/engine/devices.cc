#include "worker/engine/devices.h"

#include <torch/cuda.h>
#include <torch/utils.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <stdexcept>

#if STOKE_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAFunctions.h>
#endif

namespace stoke::worker {
namespace {

std::string CpuModelName() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line)) {
    if (line.rfind("model name", 0) == 0) {
      auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(' ', colon + 1));
    }
  }
  return "CPU";
}

#if STOKE_WITH_CUDA
std::string FormatUuid(const cudaUUID_t& uuid) {
  // NVML's form: GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx
  const auto* b = reinterpret_cast<const unsigned char*>(uuid.bytes);
  char out[64];
  std::snprintf(out, sizeof(out),
                "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
                b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
                b[14], b[15]);
  return out;
}
#endif

}  // namespace

std::vector<DeviceInfo> ListCudaDevices() {
  std::vector<DeviceInfo> devices;
  if (!torch::cuda::is_available()) return devices;
  const int n = static_cast<int>(torch::cuda::device_count());
  for (int i = 0; i < n; ++i) devices.push_back(DescribeDevice({DeviceKind::kCuda, i}));
  return devices;
}

DeviceInfo DescribeDevice(const DeviceRef& device) {
  DeviceInfo info;
  info.device = device;
  if (device.kind == DeviceKind::kCpu) {
    info.name = CpuModelName();
    info.memory_total_bytes = static_cast<uint64_t>(sysconf(_SC_PHYS_PAGES)) *
                              static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
    return info;
  }
  const int n = torch::cuda::is_available() ? static_cast<int>(torch::cuda::device_count()) : 0;
  if (device.index < 0 || device.index >= n) {
    throw std::runtime_error(device.Label() + " does not exist: this process sees " +
                             std::to_string(n) + " CUDA devices");
  }
#if STOKE_WITH_CUDA
  const cudaDeviceProp* props = at::cuda::getDeviceProperties(device.index);
  info.name = props->name;
  info.uuid = FormatUuid(props->uuid);
  info.memory_total_bytes = props->totalGlobalMem;
#endif
  return info;
}

void SetCpuThreads(int threads) {
  if (threads > 0) torch::set_num_threads(threads);
}

void MakeCurrent(const DeviceRef& device) {
#if STOKE_WITH_CUDA
  if (device.kind == DeviceKind::kCuda)
    c10::cuda::set_device(static_cast<c10::DeviceIndex>(device.index));
#else
  (void)device;
#endif
}

bool SupportsBf16(const DeviceRef& device) {
  if (device.kind == DeviceKind::kCpu) return true;
#if STOKE_WITH_CUDA
  return at::cuda::getDeviceProperties(device.index)->major >= 8;
#else
  return false;
#endif
}

}  // namespace stoke::worker
