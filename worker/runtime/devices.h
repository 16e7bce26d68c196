// The devices this process can train on, as the coordinator needs to know them. Free of
// torch headers, so the worker's main (which also sees the gRPC side) can include it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "worker/common/task.h"

namespace stoke::worker {

// Every CUDA device LibTorch sees (empty without CUDA).
std::vector<DeviceInfo> ListCudaDevices();

// Name, UUID and memory of one device; the error names the device when it does not exist.
// Throws std::runtime_error.
DeviceInfo DescribeDevice(const DeviceRef& device);

// Makes a CUDA device the current one for this thread (streams, events); no-op on CPU.
void MakeCurrent(const DeviceRef& device);

// bf16 matrix products run natively here (Ampere or newer, or any CPU).
bool SupportsBf16(const DeviceRef& device);

// The CUDA caching allocator's counters for a device (zeros on CPU). Host-side
// bookkeeping: reading it never waits for the GPU.
struct AllocatorStats {
  uint64_t allocated_bytes = 0;
  uint64_t reserved_bytes = 0;
  uint64_t peak_allocated_bytes = 0;
  uint64_t retries = 0;
};
AllocatorStats ReadAllocatorStats(const DeviceRef& device);
// Returns the CUDA caching allocator's unused blocks to the driver (no-op on CPU).
void ReleaseCachedMemory(const DeviceRef& device);
// Starts the allocator's peak anew (a worker runs job after job; each reports its own).
void ResetPeakMemoryStats(const DeviceRef& device);

// Dense bf16 tensor-core peak FLOP/s from the datasheet, for MFU; 0 when unknown.
double PeakBf16Flops(const DeviceInfo& device);

// Intra-op threads for CPU work; 0 leaves LibTorch's default (all cores).
void SetCpuThreads(int threads);

}  // namespace stoke::worker
