#include "worker/engine/batch_search.h"

#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>

#include "worker/common/byte_units.h"
#include "worker/engine/fake_batch.h"
#include "worker/engine/step_math.h"
#include "worker/models/network.h"
#include "worker/runtime/devices.h"
#include "worker/runtime/torch_compat.h"

namespace stoke::worker {
namespace {

// A value in kB from /proc/self/status ("VmHWM:", "VmRSS:") or /proc/meminfo.
uint64_t ProcKiB(const char* file, const std::string& key) {
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key, 0) == 0) {
      std::istringstream fields(line.substr(key.size()));
      uint64_t kib = 0;
      fields >> kib;
      return kib;
    }
  }
  return 0;
}

void ResetPeakMemory(const DeviceRef& device) {
  if (device.kind == DeviceKind::kCuda) {
    ReleaseCachedMemory(device);
    ResetPeakMemoryStats(device);
    return;
  }
  // Linux: writing 5 resets the process's peak resident size (VmHWM) to its current one.
  if (std::FILE* f = std::fopen("/proc/self/clear_refs", "w")) {
    std::fputs("5", f);
    std::fclose(f);
  }
}

uint64_t PeakMemory(const DeviceRef& device) {
  if (device.kind == DeviceKind::kCuda) return ReadAllocatorStats(device).peak_allocated_bytes;
  return ProcKiB("/proc/self/status", "VmHWM:") * 1024;
}

}  // namespace

BatchSearchResult SearchBatchSize(const std::function<BatchTrial(int64_t)>& trial, int64_t limit,
                                  uint64_t capacity_bytes, double headroom) {
  BatchSearchResult result;
  std::map<int64_t, uint64_t> fitted;  // batch -> peak bytes
  auto attempt = [&](int64_t batch) {
    ++result.trials;
    const BatchTrial t = trial(batch);
    if (t.fits) {
      fitted[batch] = t.peak_bytes;
    } else if (result.first_failing == 0 || batch < result.first_failing) {
      result.first_failing = batch;
      result.failure = t.failure;
    }
    return t.fits;
  };
  limit = std::max<int64_t>(1, limit);
  if (!attempt(1)) {
    if (!result.failure.empty()) throw std::runtime_error(result.failure);
    throw std::invalid_argument(
        "training.batch_size: auto found that not even a batch of 1 "
        "fits this device's memory");
  }
  int64_t fit = 1, fail = 0;
  while (fail == 0 && fit < limit) {
    const int64_t next = std::min(limit, fit * 2);
    if (attempt(next)) {
      fit = next;
    } else {
      fail = next;
    }
  }
  while (fail != 0 && fail - fit > 1) {
    const int64_t mid = fit + (fail - fit) / 2;
    if (attempt(mid)) {
      fit = mid;
    } else {
      fail = mid;
    }
  }
  result.largest_fitting = fit;
  result.peak_bytes = fitted[fit];
  result.batch = fit;
  result.predicted_peak_bytes = fitted[fit];
  // A line through the two largest fits: fixed bytes (weights, gradients, optimizer
  // state) plus bytes per sample (activations).
  if (fitted.size() >= 2) {
    auto last = fitted.rbegin();
    auto before = std::next(last);
    const double per_sample = (static_cast<double>(last->second) - before->second) /
                              static_cast<double>(last->first - before->first);
    const double fixed = static_cast<double>(last->second) - per_sample * last->first;
    const double budget = static_cast<double>(capacity_bytes) * (1.0 - headroom);
    if (per_sample > 0 && budget > fixed) {
      const auto affordable = static_cast<int64_t>((budget - fixed) / per_sample);
      result.batch = std::clamp<int64_t>(affordable, 1, fit);
    } else if (per_sample > 0) {
      result.batch = 1;
    }
    // Multiples of 8 suit tensor cores.
    if (result.batch >= 16) result.batch -= result.batch % 8;
    result.predicted_peak_bytes = static_cast<uint64_t>(
        std::max(0.0, fixed + per_sample * static_cast<double>(result.batch)));
  }
  return result;
}

BatchTrial MeasureBatch(Network& net, const DataShape& shape, const DeviceRef& device_ref,
                        bool autocast, bool fp16, bool channels_last, int64_t batch,
                        uint64_t reserve_bytes) {
  const torch::Device device = device_ref.kind == DeviceKind::kCuda
                                   ? torch::Device(torch::kCUDA, device_ref.index)
                                   : torch::Device(torch::kCPU);
  auto reset_grads = [&] {
    for (auto& p : net.parameters()) p.mutable_grad().reset();
  };
  reset_grads();
  ResetPeakMemory(device_ref);
  BatchTrial trial;
  try {
    torch::Tensor reserve;
    if (reserve_bytes > 0) {
      reserve = torch::empty({static_cast<int64_t>(reserve_bytes)},
                             torch::TensorOptions().dtype(torch::kUInt8).device(device));
    }
    // The MSE targets' shape comes from a forward pass outside autocast; the trial's own
    // forward below is the one measured.
    const FakeBatch fake = MakeFakeBatch(net, shape, batch, device, channels_last);
    torch::Tensor loss;
    {
      compat::AutocastScope scope(device.type(), fp16 ? torch::kHalf : torch::kBFloat16, autocast);
      loss = TrainingLoss(net, fake.inputs, fake.targets);
    }
    loss.backward();
    trial.fits = true;
    trial.peak_bytes = PeakMemory(device_ref);
  } catch (const c10::OutOfMemoryError&) {
    trial.fits = false;
  } catch (const std::bad_alloc&) {
    trial.fits = false;
  } catch (const c10::Error& e) {
    trial.fits = false;
    const std::string what = e.what_without_backtrace();
    trial.failure = what.substr(0, what.find('\n'));
  }
  reset_grads();
  ResetPeakMemory(device_ref);
  return trial;
}

uint64_t SearchCapacityBytes(const DeviceRef& device) {
  if (device.kind == DeviceKind::kCuda) return DescribeDevice(device).memory_total_bytes;
  return (ProcKiB("/proc/self/status", "VmRSS:") + ProcKiB("/proc/meminfo", "MemAvailable:") / 2) *
         1024;
}

int64_t SearchLimit(const DeviceRef& device, int64_t samples_per_rank) {
  const int64_t cap = device.kind == DeviceKind::kCuda ? (int64_t{1} << 20) : 1024;
  return std::max<int64_t>(1, std::min(cap, samples_per_rank));
}

std::string DescribeSearch(const BatchSearchResult& r, uint64_t capacity_bytes) {
  const auto gib = [](uint64_t bytes) { return FormatGiB(bytes, 1); };
  std::ostringstream out;
  out << "batch size search: " << r.batch << " (largest that fit: " << r.largest_fitting
      << ", peak " << gib(r.peak_bytes) << " GiB; predicted peak " << gib(r.predicted_peak_bytes)
      << " of " << gib(capacity_bytes) << " GiB; " << r.trials << " trials)";
  if (!r.failure.empty()) {
    out << "; batch " << r.first_failing << " failed with: " << r.failure;
  }
  return out.str();
}

AccumulationPlan PlanAccumulation(int64_t effective, int64_t max_batch, int world_size) {
  const int64_t ranks = std::max(1, world_size);
  max_batch = std::max<int64_t>(1, max_batch);
  const int64_t per_rank = std::max<int64_t>(1, (effective + ranks - 1) / ranks);
  const int64_t least_steps = (per_rank + max_batch - 1) / max_batch;
  // The fewest micro-steps that split the per-rank share exactly, if a few more than the
  // least do; else the least, rounding the batch up.
  for (int64_t steps = least_steps; steps <= least_steps * 2; ++steps) {
    if (per_rank % steps == 0 && per_rank / steps <= max_batch && per_rank * ranks == effective) {
      return {per_rank / steps, steps, effective};
    }
  }
  const int64_t batch = std::min(max_batch, (per_rank + least_steps - 1) / least_steps);
  return {batch, least_steps, batch * least_steps * ranks};
}

}  // namespace stoke::worker
