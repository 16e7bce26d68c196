// AdamW's update over many fp32 tensors in one kernel launch (a few, for more than
// kMaxAdamWSegments), spread over the whole GPU. ATen's fused AdamW (what torch.optim's
// fused=True runs) gives each 65,536-element chunk of a tensor one block: a small model's
// update then runs on a dozen of the GPU's 132 multiprocessors and takes a quarter of an
// MLP's step. Here every block takes a few thousand elements, and loads and stores move 16
// bytes at a time where the tensors allow.
//
// The arithmetic is torch.optim.AdamW's (decoupled weight decay, bias-corrected moments),
// reading the step count (already incremented) and the learning rate from the device, so
// that a captured CUDA graph replays it right as they change.
//
// A segment may also name a 16-bit copy of its parameter to write as it is updated: the
// weights the next step's matrix products read (worker/ops/half_weights.h). Writing them
// here costs 2 bytes a parameter more; casting them in a kernel of their own at the start
// of the next step reads the 4-byte weights again (0.2 ms of an MLP d=4096 step).
//
// Torch-free and CUDA-free like the other headers here: raw device pointers, the stream
// as void*, nullptr or CUDA's error text back.
#pragma once

#include <cstdint>

#include "worker/ops/cuda/half_type.h"

namespace stoke::worker::cuda {

struct AdamWSegment {
  float* param = nullptr;
  const float* grad = nullptr;
  float* exp_avg = nullptr;
  float* exp_avg_sq = nullptr;
  int64_t count = 0;  // elements
  // Where the updated parameter goes in 16 bits (count elements, 16-byte aligned), or
  // nullptr; rounded to nearest even, as a cast would.
  void* half_copy = nullptr;
  HalfType half_type = HalfType::kBFloat16;
};

struct AdamWHyperparameters {
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;
};

// Segments per launch (they travel in the launch's parameters).
constexpr int kMaxAdamWSegments = 36;

// One AdamW step of every segment. lr and step: device fp32 scalars (step counts the step
// being taken, from 1). found_inf: a device fp32 scalar, or nullptr; where it is nonzero
// nothing changes (an fp16 step whose gradients overflowed).
const char* AdamWStep(const AdamWSegment* segments, int count, const float* lr, const float* step,
                      const float* found_inf, const AdamWHyperparameters& hyper, void* stream);

}  // namespace stoke::worker::cuda
