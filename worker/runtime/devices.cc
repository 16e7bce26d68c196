#include "worker/runtime/devices.h"

#include <torch/cuda.h>
#include <torch/utils.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <stdexcept>

#if STOKE_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
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

AllocatorStats ReadAllocatorStats(const DeviceRef& device) {
  AllocatorStats out;
#if STOKE_WITH_CUDA
  if (device.kind != DeviceKind::kCuda) return out;
  const auto stats =
      c10::cuda::CUDACachingAllocator::getDeviceStats(static_cast<c10::DeviceIndex>(device.index));
  // Index 0 of each StatArray is the aggregate over small and large pools.
  out.allocated_bytes = static_cast<uint64_t>(stats.allocated_bytes[0].current);
  out.reserved_bytes = static_cast<uint64_t>(stats.reserved_bytes[0].current);
  out.peak_allocated_bytes = static_cast<uint64_t>(stats.allocated_bytes[0].peak);
  out.retries = static_cast<uint64_t>(stats.num_alloc_retries);
#else
  (void)device;
#endif
  return out;
}

void ReleaseCachedMemory(const DeviceRef& device) {
#if STOKE_WITH_CUDA
  if (device.kind == DeviceKind::kCuda) c10::cuda::CUDACachingAllocator::emptyCache();
#else
  (void)device;
#endif
}

void ResetPeakMemoryStats(const DeviceRef& device) {
#if STOKE_WITH_CUDA
  if (device.kind == DeviceKind::kCuda) {
    c10::cuda::CUDACachingAllocator::resetPeakStats(static_cast<c10::DeviceIndex>(device.index));
  }
#else
  (void)device;
#endif
}

double PeakBf16Flops(const DeviceInfo& device) {
  if (device.device.kind != DeviceKind::kCuda) return 0;
  // Datasheet dense (not sparse) bf16 tensor-core rates, SXM parts.
  struct Peak {
    const char* name;
    double flops;
  };
  static constexpr Peak kPeaks[] = {
      {"H200", 989e12}, {"H100", 989e12}, {"A100", 312e12}, {"L40S", 362e12},
      {"L40", 181e12},  {"L4", 121e12},   {"A10", 125e12},
  };
  for (const Peak& peak : kPeaks) {
    if (device.name.find(peak.name) != std::string::npos) return peak.flops;
  }
  return 0;
}

}  // namespace stoke::worker
