// Whether Stoke's own CUDA kernels (worker/ops/cuda/: layer norm, batch norm with its
// add and ReLU, max pooling, the loss, bias gradients with the GELU's or ReLU's backward,
// bias and ReLU in the matrix product's epilogue, the step's weight casts) may run where
// they apply: the job spec's `training.fused_kernels`. Off, every layer takes ATen's
// operations, as a build without nvcc does: to compare the two, or to rule Stoke's kernels
// out when a result looks wrong.
//
// The process's setting, not a thread's: a worker trains one job at a time, and the
// autograd threads that recompute checkpointed blocks in backward must decide as the
// training thread did.
#pragma once

namespace stoke::worker {

bool OwnKernelsAllowed();

// Allows or forbids the kernels for its lifetime (a training run), then restores the
// setting it found.
class OwnKernelsSetting {
 public:
  explicit OwnKernelsSetting(bool allowed);
  ~OwnKernelsSetting();
  OwnKernelsSetting(const OwnKernelsSetting&) = delete;
  OwnKernelsSetting& operator=(const OwnKernelsSetting&) = delete;

 private:
  bool previous_;
};

}  // namespace stoke::worker
