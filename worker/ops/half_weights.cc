#include "worker/ops/half_weights.h"

#include <iterator>
#include <map>
#include <tuple>
#include <utility>

#if STOKE_WITH_CUDA_KERNELS
#include <c10/cuda/CUDAGuard.h>

#include "worker/ops/cuda/cast_kernels.h"
#include "worker/ops/own_kernel_call.h"
#endif

namespace stoke::worker {

HalfWeights::Entry* HalfWeights::EntryOf(const torch::Tensor& parameter) {
  auto it = entries_.find(parameter.unsafeGetTensorImpl());
  if (it == entries_.end()) return nullptr;
  if (it->second.parameter.lock().get() != parameter.unsafeGetTensorImpl()) {
    entries_.erase(it);
    return nullptr;
  }
  return &it->second;
}

void HalfWeights::Want(const torch::Tensor& parameter, at::ScalarType type) {
  std::lock_guard<std::mutex> lock(mutex_);
  Entry* entry = EntryOf(parameter);
  if (entry == nullptr) {
    // A new entry is rare (a layer's first step): the moment to drop those of tensors
    // that are gone.
    for (auto it = entries_.begin(); it != entries_.end();) {
      it = it->second.parameter.expired() ? entries_.erase(it) : std::next(it);
    }
    entry = &entries_.emplace(parameter.unsafeGetTensorImpl(), Entry(parameter)).first->second;
  }
  if (entry->type != type) entry->copy = torch::Tensor();
  entry->type = type;
}

void HalfWeights::Refresh(const std::vector<torch::Tensor>& parameters) {
#if STOKE_WITH_CUDA_KERNELS
  std::lock_guard<std::mutex> lock(mutex_);
  // The wanted parameters by device and type, in the order given (so each step's
  // buffers are laid out alike).
  using Wanted = std::pair<Entry*, const torch::Tensor*>;
  std::map<std::pair<int, at::ScalarType>, std::vector<Wanted>> groups;
  for (const torch::Tensor& p : parameters) {
    Entry* entry = EntryOf(p);
    if (entry == nullptr) continue;
    entry->copy = torch::Tensor();
    if (!p.is_cuda() || p.scalar_type() != at::kFloat || !p.is_contiguous()) continue;
    groups[{p.get_device(), entry->type}].emplace_back(entry, &p);
  }
  for (const auto& [key, wanted] : groups) {
    const auto& [device, type] = key;
    const c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device));
    std::vector<cuda::CastSegment> segments;
    int64_t total = 0;
    for (const auto& [entry, p] : wanted) {
      cuda::CastSegment segment;
      segment.source = p->data_ptr<float>();
      segment.count = p->numel();
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
    for (size_t k = 0; k < wanted.size(); ++k) {
      const auto& [entry, p] = wanted[k];
      entry->copy = buffer.narrow(0, segments[k].offset, segments[k].count).view(p->sizes());
      entry->version = static_cast<int64_t>(p->_version());
    }
  }
#else
  (void)parameters;
#endif
}

torch::Tensor HalfWeights::Find(const torch::Tensor& parameter, at::ScalarType type) {
  std::lock_guard<std::mutex> lock(mutex_);
  const Entry* entry = EntryOf(parameter);
  if (entry == nullptr || !entry->copy.defined() || entry->type != type ||
      entry->version != static_cast<int64_t>(parameter._version())) {
    return {};
  }
  return entry->copy;
}

void HalfWeights::Release(const std::vector<torch::Tensor>& parameters) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const torch::Tensor& p : parameters) {
    if (Entry* entry = EntryOf(p)) entry->copy = torch::Tensor();
  }
}

void HalfWeights::Forget(const std::vector<torch::Tensor>& parameters) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const torch::Tensor& p : parameters) entries_.erase(p.unsafeGetTensorImpl());
}

}  // namespace stoke::worker
