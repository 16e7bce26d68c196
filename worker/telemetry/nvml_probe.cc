// GPU readings through NVML, opened at run time. The few declarations below are NVML's
// documented C API (nvml.h); we declare them ourselves so that building needs no NVML
// headers and running needs no driver unless there is a GPU to read.
#include <dlfcn.h>

#include <mutex>

#include "worker/telemetry/device_sampler.h"

namespace stoke::worker {
namespace {

using NvmlDevice = struct NvmlDeviceOpaque*;
struct NvmlUtilization {
  unsigned int gpu;     // percent of time a kernel ran
  unsigned int memory;  // percent of time memory was read or written
};
struct NvmlMemory {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};
constexpr int kNvmlSuccess = 0;
constexpr int kNvmlClockSm = 1;
constexpr int kNvmlTemperatureGpu = 0;

struct NvmlApi {
  int (*init)();
  const char* (*error_string)(int);
  int (*handle_by_uuid)(const char*, NvmlDevice*);
  int (*utilization)(NvmlDevice, NvmlUtilization*);
  int (*memory)(NvmlDevice, NvmlMemory*);
  int (*clock)(NvmlDevice, int, unsigned int*);
  int (*power)(NvmlDevice, unsigned int*);
  int (*temperature)(NvmlDevice, int, unsigned int*);
};

// Loads and initialises NVML once per process; null (with the reason) if it cannot.
const NvmlApi* LoadNvml(std::string* why) {
  static std::once_flag once;
  static NvmlApi api;
  static const NvmlApi* loaded = nullptr;
  static std::string failure;
  std::call_once(once, [] {
    void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      failure = "NVML not found (libnvidia-ml.so.1): " + std::string(dlerror());
      return;
    }
    auto sym = [&](const char* name) { return dlsym(lib, name); };
    api.init = reinterpret_cast<int (*)()>(sym("nvmlInit_v2"));
    api.error_string = reinterpret_cast<const char* (*)(int)>(sym("nvmlErrorString"));
    api.handle_by_uuid =
        reinterpret_cast<int (*)(const char*, NvmlDevice*)>(sym("nvmlDeviceGetHandleByUUID"));
    api.utilization = reinterpret_cast<int (*)(NvmlDevice, NvmlUtilization*)>(
        sym("nvmlDeviceGetUtilizationRates"));
    api.memory = reinterpret_cast<int (*)(NvmlDevice, NvmlMemory*)>(sym("nvmlDeviceGetMemoryInfo"));
    api.clock =
        reinterpret_cast<int (*)(NvmlDevice, int, unsigned int*)>(sym("nvmlDeviceGetClockInfo"));
    api.power =
        reinterpret_cast<int (*)(NvmlDevice, unsigned int*)>(sym("nvmlDeviceGetPowerUsage"));
    api.temperature =
        reinterpret_cast<int (*)(NvmlDevice, int, unsigned int*)>(sym("nvmlDeviceGetTemperature"));
    if (!api.init || !api.error_string || !api.handle_by_uuid || !api.utilization || !api.memory ||
        !api.clock || !api.power || !api.temperature) {
      failure = "NVML lacks a function Stoke needs";
      return;
    }
    const int s = api.init();
    if (s != kNvmlSuccess) {
      failure = std::string("nvmlInit failed: ") + api.error_string(s);
      return;
    }
    loaded = &api;
  });
  if (!loaded && why) *why = failure;
  return loaded;
}

class NvmlProbe final : public DeviceProbe {
 public:
  NvmlProbe(const NvmlApi& api, NvmlDevice device) : api_(api), device_(device) {}

  std::optional<DeviceStats> Read() override {
    DeviceStats stats;
    stats.source = "nvml";
    NvmlUtilization utilization{};
    NvmlMemory memory{};
    // Utilization and memory are the readings that matter; the rest is optional (some
    // boards do not report power, for one).
    if (api_.utilization(device_, &utilization) != kNvmlSuccess ||
        api_.memory(device_, &memory) != kNvmlSuccess) {
      return std::nullopt;
    }
    stats.utilization = utilization.gpu / 100.0;
    stats.memory_used_bytes = memory.used;
    stats.memory_total_bytes = memory.total;
    unsigned int value = 0;
    if (api_.clock(device_, kNvmlClockSm, &value) == kNvmlSuccess) stats.sm_clock_hz = value * 1e6;
    if (api_.power(device_, &value) == kNvmlSuccess) stats.power_watts = value / 1000.0;
    if (api_.temperature(device_, kNvmlTemperatureGpu, &value) == kNvmlSuccess) {
      stats.temperature_celsius = value;
    }
    return stats;
  }

 private:
  const NvmlApi& api_;
  NvmlDevice device_;
};

}  // namespace

std::unique_ptr<DeviceProbe> MakeNvmlProbe(const DeviceInfo& device, std::string* why) {
  const NvmlApi* api = LoadNvml(why);
  if (!api) return nullptr;
  NvmlDevice handle = nullptr;
  // By UUID, not index: NVML numbers GPUs by PCI bus, CUDA (by default) fastest first, and
  // CUDA_VISIBLE_DEVICES renumbers them again.
  const int s = api->handle_by_uuid(device.uuid.c_str(), &handle);
  if (s != kNvmlSuccess) {
    *why = "NVML does not know GPU " + device.uuid + ": " + api->error_string(s);
    return nullptr;
  }
  return std::make_unique<NvmlProbe>(*api, handle);
}

}  // namespace stoke::worker
