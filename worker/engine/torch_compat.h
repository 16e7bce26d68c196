// The one place that knows LibTorch versions differ. Stoke builds against Debian's
// libtorch 1.13 (CPU, for CI) and the torch 2.x wheel on the GPU machines; everything
// that changed between them is wrapped here.
#pragma once

#include <ATen/autocast_mode.h>
#include <torch/version.h>

#define STOKE_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) ||        \
   (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

namespace stoke::worker::compat {

// Turns autocast on or off for one device type, with the given lower precision.
// torch 2.4 replaced the per-backend setters with ones taking a DeviceType.
inline void SetAutocast(c10::DeviceType type, bool enabled, at::ScalarType dtype) {
#if STOKE_TORCH_AT_LEAST(2, 4)
  at::autocast::set_autocast_enabled(type, enabled);
  at::autocast::set_autocast_dtype(type, dtype);
#else
  if (type == c10::DeviceType::CUDA) {
    at::autocast::set_enabled(enabled);
    at::autocast::set_autocast_gpu_dtype(dtype);
  } else {
    at::autocast::set_cpu_enabled(enabled);
    at::autocast::set_autocast_cpu_dtype(dtype);
  }
#endif
}

// What Python's `with torch.autocast(...)` does, for the forward pass of one step: on,
// then off, and the cast-weight cache cleared on the way out — without that the next
// step would reuse bf16 copies of weights the optimizer has since changed.
class AutocastScope {
 public:
  AutocastScope(c10::DeviceType type, at::ScalarType dtype, bool enabled)
      : type_(type), dtype_(dtype), enabled_(enabled) {
    if (!enabled_) return;
    SetAutocast(type_, true, dtype_);
    at::autocast::increment_nesting();
  }
  ~AutocastScope() {
    if (!enabled_) return;
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    SetAutocast(type_, false, dtype_);
  }
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  c10::DeviceType type_;
  at::ScalarType dtype_;
  bool enabled_;
};

}  // namespace stoke::worker::compat
