// 16-bit copies of a step's fp32 weights, made together at the start of the step.
//
// Under bf16/fp16 autocast each linear layer casts its weight and bias before it
// multiplies: one small kernel each, 96 a GPT-2 small step, every one a node of the
// captured graph (convolutions' weights too: 36 a ResNet-34 step). AutocastLinear
// (half_linear.h) and AutocastConv2d (half_conv.h) instead ask this table for a copy; the
// first time it finds none it casts as before and marks the parameter as wanted, and from
// the next step on the step runner's Refresh casts every wanted parameter in one kernel
// launch (worker/ops/cuda/cast_kernels.h) before the forward pass.
//
// Better still, the optimizer writes the copies as it updates the weights (Stoke's AdamW
// kernel does: own_adamw.h), and the next step's Refresh casts nothing. For that the
// copies live in one buffer per device and type that stays from step to step (a CUDA
// graph captures its address), and Refresh skips the cast only where the optimizer of
// the step before wrote every copy of the buffer since it last looked, and no parameter
// changed after (its version counter). A step whose optimizer wrote nothing (another
// optimizer, a skipped fp16 step) is cast as before.
//
// Overwriting a copy in place is safe: the step that read it has finished its backward
// pass (which held it) by the time its optimizer runs, and Refresh runs before the next
// forward pass.
//
// A copy is handed out only while it is certainly the parameter's value. In a step,
// Refresh hands copies out and Release takes them back at its end, and each carries the
// parameter's version counter at the start of the step, so an in-place change inside the
// step retires it. Between steps, the copy the last optimizer wrote is handed out while
// the parameter's version is the one it had then: evaluation multiplies with it instead
// of casting every weight again and holding a second copy (a fifth more memory for an
// MLP's evaluation at d=4096); a loaded checkpoint, a batch search's trial network or a
// step whose optimizer wrote nothing finds none. Without Stoke's CUDA kernels (CPU
// builds) Refresh makes nothing and every layer casts for itself.
//
// The table belongs to a training run's StepContext (step_context.h), through which layers
// and the step runner meet without knowing of each other. Entries hold their parameter
// weakly (a batch search's trial network asks too, and its memory must go with it) and
// are matched to the tensor itself, not just to its address, which a later tensor may
// reuse; Forget drops them when a job's step runner goes.
#pragma once

#include <c10/util/intrusive_ptr.h>
#include <torch/types.h>

#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace stoke::worker {

class HalfWeights {
 public:
  // `parameter` is cast to `type` by a layer: Refresh should make that copy from now on.
  void Want(const torch::Tensor& parameter, at::ScalarType type);
  // Hands out copies of the wanted ones among `parameters` (fp32, dense, on a CUDA device;
  // each copy in its parameter's layout) for this step: cast in one kernel launch per device and
  // type (a few for more than 48), unless the last step's optimizer wrote them all (MarkWritten).
  // Returns how many it cast.
  int Refresh(const std::vector<torch::Tensor>& parameters);
  // For an optimizer about to update `parameters` in place: where each one's copy lives
  // (a view the optimizer may write the updated value into, 16-byte aligned), or an
  // undefined tensor where it has none.
  std::vector<torch::Tensor> CopiesToWrite(const std::vector<torch::Tensor>& parameters);
  // The optimizer wrote the copies CopiesToWrite gave for these parameters: the next
  // Refresh need not cast them.
  void MarkWritten(const std::vector<torch::Tensor>& parameters);
  // Casts again, outside any step, the copies of those of `parameters` changed since the
  // last Refresh: a replayed CUDA graph reads the copies its optimizer wrote and runs no
  // Refresh of its own, so a change made between replays (a loaded checkpoint) must reach
  // them here. True if it cast.
  bool RecastChanged(const std::vector<torch::Tensor>& parameters);
  // The copy of `parameter` in `type` that the running step's Refresh handed out, or
  // between steps the one the last optimizer wrote, if there is one and the parameter
  // has not changed since; else an undefined tensor.
  torch::Tensor Find(const torch::Tensor& parameter, at::ScalarType type);
  // Drops these parameters' copies (they stay wanted): the step is over.
  void Release(const std::vector<torch::Tensor>& parameters);
  // Drops everything about these parameters.
  void Forget(const std::vector<torch::Tensor>& parameters);

 private:
  static constexpr int64_t kNotWritten = -1;
  struct Entry {
    explicit Entry(const torch::Tensor& p) : parameter(p.getIntrusivePtr()) {}
    c10::weak_intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl> parameter;
    at::ScalarType type = at::kBFloat16;
    // The buffer the copy lives in, shared by its device and type's entries, and where.
    torch::Tensor buffer;
    int64_t offset = 0;
    torch::Tensor slot;    // buffer's elements [offset, offset + numel), as the parameter
    bool in_step = false;  // Refresh handed the slot out; Release takes it back
    int64_t version = -1;  // the parameter's at the last Refresh
    // The parameter's version when MarkWritten said the optimizer wrote the slot, or
    // kNotWritten (Refresh resets it). A version counter is never negative.
    int64_t written_version = kNotWritten;
  };
  using Wanted = std::pair<Entry*, const torch::Tensor*>;
  // The entry of `parameter` itself, or nullptr (an entry left by a dead tensor at the
  // same address is dropped). Called with mutex_ held.
  Entry* EntryOf(const torch::Tensor& parameter);
  // Gives the wanted entries of one device and type slots in one buffer: the one they
  // share already if it is laid out as they ask, else a new one. True if they kept theirs.
  static bool PlaceInBuffer(const std::vector<Wanted>& wanted, int device, at::ScalarType type);
  // Casts the parameters of `wanted` into their slots, one launch (a few beyond 48).
  static void CastIntoSlots(const std::vector<Wanted>& wanted, at::ScalarType type);

  std::mutex mutex_;
  std::unordered_map<const void*, Entry> entries_;
};

}  // namespace stoke::worker
