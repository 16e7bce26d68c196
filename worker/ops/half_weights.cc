#include "worker/ops/half_weights.h"

#include <algorithm>
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
  if (entry->type != type) {
    entry->in_step = false;
    entry->slot = torch::Tensor();  // its buffer is of the other type: place it anew
    entry->written_version = kNotWritten;
  }
  entry->type = type;
}

#if STOKE_WITH_CUDA_KERNELS

bool HalfWeights::PlaceInBuffer(const std::vector<Wanted>& wanted, int device,
                                at::ScalarType type) {
  std::vector<int64_t> offsets;
  int64_t total = 0;
  for (const auto& [entry, p] : wanted) {
    offsets.push_back(total);
    total += (p->numel() + 7) / 8 * 8;  // each copy starts on 16 bytes
  }
  const torch::Tensor& shared = wanted.front().first->buffer;
  bool kept = shared.defined() && shared.scalar_type() == type && shared.numel() == total;
  for (size_t k = 0; kept && k < wanted.size(); ++k) {
    const Entry& entry = *wanted[k].first;
    kept = entry.buffer.is_same(shared) && entry.offset == offsets[k] && entry.slot.defined() &&
           entry.slot.sizes() == wanted[k].second->sizes() &&
           entry.slot.strides() == wanted[k].second->strides();
  }
  if (kept) return true;
  const torch::Tensor buffer =
      torch::empty({total}, torch::TensorOptions().dtype(type).device(torch::kCUDA, device));
  for (size_t k = 0; k < wanted.size(); ++k) {
    const auto& [entry, p] = wanted[k];
    entry->buffer = buffer;
    entry->offset = offsets[k];
    // In the parameter's own layout (a convolution's weight is channels-last): the cast
    // and the optimizer write the copy element by element in memory order.
    entry->slot = buffer.narrow(0, offsets[k], p->numel()).as_strided(p->sizes(), p->strides());
    entry->written_version = kNotWritten;
  }
  return false;
}

void HalfWeights::CastIntoSlots(const std::vector<Wanted>& wanted, at::ScalarType type) {
  std::vector<cuda::CastSegment> segments;
  for (const auto& [entry, p] : wanted) {
    cuda::CastSegment segment;
    segment.source = p->data_ptr<float>();
    segment.count = p->numel();
    segment.offset = entry->offset;
    segments.push_back(segment);
  }
  const torch::Tensor& buffer = wanted.front().first->buffer;
  CheckKernel(
      cuda::CastToHalf(segments.data(), static_cast<int>(segments.size()), buffer.data_ptr(),
                       HalfTypeOf(type, "HalfWeights"), CurrentStreamOf(buffer)),
      "weight cast");
}

#endif

int HalfWeights::Refresh(const std::vector<torch::Tensor>& parameters) {
#if STOKE_WITH_CUDA_KERNELS
  std::lock_guard<std::mutex> lock(mutex_);
  // The wanted parameters by device and type, in the order given (so each step's
  // buffers are laid out alike).
  std::map<std::pair<int, at::ScalarType>, std::vector<Wanted>> groups;
  int cast = 0;
  for (const torch::Tensor& p : parameters) {
    Entry* entry = EntryOf(p);
    if (entry == nullptr) continue;
    entry->in_step = false;
    if (!p.is_cuda() || p.scalar_type() != at::kFloat || !p.is_non_overlapping_and_dense()) {
      continue;
    }
    groups[{p.get_device(), entry->type}].emplace_back(entry, &p);
  }
  for (const auto& [key, wanted] : groups) {
    const auto& [device, type] = key;
    const c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device));
    bool current = PlaceInBuffer(wanted, device, type);
    for (const auto& [entry, p] : wanted) {
      current = current && entry->written_version == static_cast<int64_t>(p->_version());
    }
    if (!current) {
      CastIntoSlots(wanted, type);
      cast += static_cast<int>(wanted.size());
    }
    for (const auto& [entry, p] : wanted) {
      entry->in_step = true;
      entry->version = static_cast<int64_t>(p->_version());
      entry->written_version = kNotWritten;
    }
  }
  return cast;
#else
  (void)parameters;
  return 0;
#endif
}

std::vector<torch::Tensor> HalfWeights::CopiesToWrite(
    const std::vector<torch::Tensor>& parameters) {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<torch::Tensor> slots;
  slots.reserve(parameters.size());
  for (const torch::Tensor& p : parameters) {
    const Entry* entry = EntryOf(p);
    // Only a slot Refresh filled this step: one it left (a parameter no longer in the
    // step, or moved to a new buffer) is no copy of anything.
    const bool live = entry != nullptr && entry->in_step;
    slots.push_back(live ? entry->slot : torch::Tensor());
  }
  return slots;
}

void HalfWeights::MarkWritten(const std::vector<torch::Tensor>& parameters) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const torch::Tensor& p : parameters) {
    Entry* entry = EntryOf(p);
    if (entry == nullptr || !entry->in_step) continue;
    entry->written_version = static_cast<int64_t>(p._version());
  }
}

bool HalfWeights::RecastChanged(const std::vector<torch::Tensor>& parameters) {
#if STOKE_WITH_CUDA_KERNELS
  std::lock_guard<std::mutex> lock(mutex_);
  // Called before every replay, and nothing changes a parameter between replays in a run
  // today: look first, and build nothing unless a version moved.
  const auto moved = [this](const torch::Tensor& p) {
    const Entry* entry = EntryOf(p);
    return entry != nullptr && entry->slot.defined() && entry->version >= 0 &&
           entry->version != static_cast<int64_t>(p._version());
  };
  if (std::none_of(parameters.begin(), parameters.end(), moved)) return false;
  // By buffer: a changed parameter recasts its whole buffer, one launch.
  std::map<const void*, std::vector<Wanted>> buffers;
  std::map<const void*, bool> changed;
  for (const torch::Tensor& p : parameters) {
    Entry* entry = EntryOf(p);
    if (entry == nullptr || !entry->slot.defined() || entry->version < 0) continue;
    const void* key = entry->buffer.data_ptr();
    buffers[key].emplace_back(entry, &p);
    changed[key] = changed[key] || entry->version != static_cast<int64_t>(p._version());
  }
  bool cast = false;
  for (const auto& [key, wanted] : buffers) {
    if (!changed[key]) continue;
    const c10::cuda::CUDAGuard guard(wanted.front().first->buffer.device());
    CastIntoSlots(wanted, wanted.front().first->type);
    for (const auto& [entry, p] : wanted) {
      entry->version = static_cast<int64_t>(p->_version());
      // As current as the optimizer's copies: evaluation may read them.
      entry->written_version = entry->version;
    }
    cast = true;
  }
  return cast;
#else
  (void)parameters;
  return false;
#endif
}

torch::Tensor HalfWeights::Find(const torch::Tensor& parameter, at::ScalarType type) {
  std::lock_guard<std::mutex> lock(mutex_);
  const Entry* entry = EntryOf(parameter);
  if (entry == nullptr || entry->type != type) return {};
  const auto version = static_cast<int64_t>(parameter._version());
  if (entry->in_step) return entry->version == version ? entry->slot : torch::Tensor();
  // Between steps: the copy the last optimizer wrote, while the parameter is unchanged.
  if (entry->written_version == version) return entry->slot;
  return {};
}

void HalfWeights::Release(const std::vector<torch::Tensor>& parameters) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const torch::Tensor& p : parameters) {
    if (Entry* entry = EntryOf(p)) entry->in_step = false;
  }
}

void HalfWeights::Forget(const std::vector<torch::Tensor>& parameters) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const torch::Tensor& p : parameters) entries_.erase(p.unsafeGetTensorImpl());
}

}  // namespace stoke::worker
