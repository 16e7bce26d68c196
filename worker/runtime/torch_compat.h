// The one place that knows LibTorch versions differ. Stoke builds against Debian's
// libtorch 1.13 (CPU, for CI) and the torch 2.x wheel on the GPU machines; everything
// that changed between them is wrapped here.
#pragma once

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <torch/version.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

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

// Whether autocast is on for one device type, and to which lower precision.
struct AutocastState {
  bool enabled = false;
  at::ScalarType dtype = at::kBFloat16;
};

// torch 2.4 replaced the per-backend getters with ones taking a DeviceType. Before it,
// only CPU and CUDA matter to us; other device types read as off.
inline AutocastState GetAutocast(c10::DeviceType type) {
#if STOKE_TORCH_AT_LEAST(2, 4)
  return {at::autocast::is_autocast_enabled(type), at::autocast::get_autocast_dtype(type)};
#else
  if (type == c10::DeviceType::CUDA) {
    return {at::autocast::is_enabled(), at::autocast::get_autocast_gpu_dtype()};
  }
  if (type == c10::DeviceType::CPU) {
    return {at::autocast::is_cpu_enabled(), at::autocast::get_autocast_cpu_dtype()};
  }
  return {};
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

// Causal (each position sees itself and earlier ones) multi-head self-attention of q, k
// and v, each [batch, heads, time, head_dim]; dropout_p applies to the attention weights,
// so pass 0 in eval. torch 2.0 added a fused kernel (flash or memory-efficient attention
// on CUDA) that never materialises the [time, time] scores; 1.13 gets the same sums
// spelled out. Only the leading parameters are passed: later versions added more (scale,
// enable_gqa) with defaults.
inline at::Tensor CausalSelfAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                      double dropout_p) {
#if STOKE_TORCH_AT_LEAST(2, 0)
  return at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, dropout_p,
                                          /*is_causal=*/true);
#else
  const at::Tensor scores =
      at::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(q.size(-1)));
  const at::Tensor future =
      at::ones({q.size(-2), k.size(-2)}, q.options().dtype(at::kBool)).triu(/*diagonal=*/1);
  at::Tensor weights =
      at::softmax(scores.masked_fill(future, -std::numeric_limits<double>::infinity()), -1);
  if (dropout_p > 0) weights = at::dropout(weights, dropout_p, /*train=*/true);
  return at::matmul(weights, v);
#endif
}

// out = a @ b, written into `out` in out's type (float32 from bf16/fp16 factors). torch
// 2.11 (the version whose headers this was read off; `mm.dtype_out` may be older) lets
// the matrix product write float32 itself; before, the product is made in the factors'
// type and cast into `out` in one more pass.
inline void MatmulInto(at::Tensor& out, const at::Tensor& a, const at::Tensor& b) {
  if (out.scalar_type() == a.scalar_type()) {
    at::mm_out(out, a, b);
    return;
  }
#if STOKE_TORCH_AT_LEAST(2, 11)
  if (out.is_cuda() && out.scalar_type() == at::kFloat &&
      (a.scalar_type() == at::kBFloat16 || a.scalar_type() == at::kHalf)) {
    at::mm_out(out, a, b, at::kFloat);
    return;
  }
#endif
  out.copy_(at::mm(a, b));
}

// Loss scaling (fp16). ATen's kernels do the unscale-and-check of all gradients in one
// multi-tensor pass and the scale update without leaving the device; 1.13 has them for
// CUDA only, so CPUs take the same arithmetic in ordinary tensor ops.
inline void NonFiniteCheckAndUnscale(const std::vector<at::Tensor>& grads, at::Tensor& found_inf,
                                     const at::Tensor& inv_scale) {
  if (found_inf.is_cuda()) {
    at::_amp_foreach_non_finite_check_and_unscale_(grads, found_inf, inv_scale);
    return;
  }
  for (const at::Tensor& g : grads) {
    const at::Tensor bad = g.isfinite().logical_not().any().to(found_inf.scalar_type());
    found_inf.copy_(at::maximum(found_inf, bad.reshape({1})));
    g.mul_(inv_scale.to(g.scalar_type()));
  }
}

inline void UpdateScale(at::Tensor& scale, at::Tensor& growth_tracker, const at::Tensor& found_inf,
                        double growth_factor, double backoff_factor, int64_t growth_interval) {
  if (scale.is_cuda()) {
    at::_amp_update_scale_(scale, growth_tracker, found_inf, growth_factor, backoff_factor,
                           growth_interval);
    return;
  }
  const at::Tensor overflowed = found_inf > 0;
  const at::Tensor clean =
      at::where(overflowed, at::zeros_like(growth_tracker), growth_tracker + 1);
  const at::Tensor grow = clean >= growth_interval;
  scale.copy_(
      at::where(overflowed, scale * backoff_factor, at::where(grow, scale * growth_factor, scale)));
  growth_tracker.copy_(at::where(grow, at::zeros_like(clean), clean));
}

// Whether a LibTorch error is an allocation that failed. CUDA's are c10::OutOfMemoryError
// in every version; the CPU allocator's were a plain c10::Error in 1.13 ("can't allocate
// memory") and say "not enough memory" in later versions, some of which throw
// OutOfMemoryError for them too.
inline bool IsOutOfMemory(const c10::Error& error) {
  if (dynamic_cast<const c10::OutOfMemoryError*>(&error) != nullptr) return true;
  const std::string message = error.what_without_backtrace();
  return message.find("DefaultCPUAllocator: can't allocate memory") != std::string::npos ||
         message.find("DefaultCPUAllocator: not enough memory") != std::string::npos;
}

}  // namespace stoke::worker::compat
