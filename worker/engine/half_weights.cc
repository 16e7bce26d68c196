#include "worker/engine/half_weights.h"

#include <map>
#include <tuple>
#include <utility>

#if STOKE_WITH_CUDA_KERNELS
#include <c10/cuda/CUDAGuard.h>

#include "worker/engine/cuda/cast_kernels.h"
#include "worker/engine/own_kernel_call.h"
#endif

namespace stoke::worker {

HalfWeights& HalfWeights::Process() {
  static HalfWeights table;
  return table;
}

void HalfWeights::Want(const torch::Tensor& parameter, at::ScalarType type) {
  std::lock_guard<std::mutex> lock(mutex_);
  Entry& entry = entries_[parameter.unsafeGetTensorImpl()];
  entry.parameter = parameter;
  if (entry.type != type) entry.copy = torch::Tensor();
  entry.type = type;
}

void HalfWeights::Refresh(const std::vector<torch::Tensor>& parameters) {
#if STOKE_WITH_CUDA_KERNELS
  std::lock_guard<std::mutex> lock(mutex_);
  // The wanted parameters by device and type, in the order given (so each step's
  // buffers are laid out alike).
  std::map<std::pair<int, at::ScalarType>, std::vector<Entry*>> groups;
  for (const torch::Tensor& p : parameters) {
    auto it = entries_.find(p.unsafeGetTensorImpl());
    if (it == entries_.end()) continue;
    Entry& entry = it->second;
    entry.copy = torch::Tensor();
    if (!p.is_cuda() || p.scalar_type() != at::kFloat || !p.is_contiguous()) continue;
    groups[{p.get_device(), entry.type}].push_back(&entry);
  }
  for (auto& [key, entries] : groups) {
    const auto& [device, type] = key;
    const c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device));
    std::vector<cuda::CastSegment> segments;
    int64_t total = 0;
    for (const Entry* entry : entries) {
      cuda::CastSegment segment;
      segment.source = entry->parameter.data_ptr<float>();
      segment.count = entry->parameter.numel();
      segment.offset = total;
      segments.push_back(segment);
      total += (segment.count + 7) / 8 * 8;  // each copy starts on 16 bytes
    }
    // A fresh buffer each step: a copy the last step's autograd graph still holds is
    // never overwritten under it.
    const torch::Tensor buffer =
        torch::empty({total}, torch::TensorOptions().dtype(type).device(torch::kCUDA, device));
    CheckKernel(
        cuda::CastToHalf(segments.data(), static_cast<int>(segments.size()), buffer.data_ptr(),
                         HalfTypeOf(type, "HalfWeights"), CurrentStreamOf(buffer)),
        "weight cast");
    for (size_t k = 0; k < entries.size(); ++k) {
      Entry& entry = *entries[k];
      entry.copy =
          buffer.narrow(0, segments[k].offset, segments[k].count).view(entry.parameter.sizes());
      entry.version = static_cast<int64_t>(entry.parameter._version());
    }
  }
#else
  (void)parameters;
#endif
}

torch::Tensor HalfWeights::Find(const torch::Tensor& parameter, at::ScalarType type) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = entries_.find(parameter.unsafeGetTensorImpl());
  if (it == entries_.end()) return {};
  const Entry& entry = it->second;
  if (!entry.copy.defined() || entry.type != type ||
      entry.version != static_cast<int64_t>(parameter._version())) {
    return {};
  }
  return entry.copy;
}

void HalfWeights::Release(const std::vector<torch::Tensor>& parameters) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const torch::Tensor& p : parameters) {
    auto it = entries_.find(p.unsafeGetTensorImpl());
    if (it != entries_.end()) it->second.copy = torch::Tensor();
  }
}

void HalfWeights::Forget(const std::vector<torch::Tensor>& parameters) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const torch::Tensor& p : parameters) entries_.erase(p.unsafeGetTensorImpl());
}

}  // namespace stoke::worker
