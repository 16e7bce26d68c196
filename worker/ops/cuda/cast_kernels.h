// Many fp32 arrays cast to bf16/fp16 in one kernel launch (a few, for more than
// kMaxCastSegments): the weights and biases a step's linear layers multiply in 16 bits.
// Autocast casts each of them in a kernel of its own, 96 a GPT-2 small step (its linear
// layers' weights and biases), each a node of the captured graph.
//
// Torch-free and CUDA-free like the other headers here: raw device pointers, the stream
// as void*, nullptr or CUDA's error text back.
#pragma once

#include <cstdint>

#include "worker/ops/cuda/half_type.h"

namespace stoke::worker::cuda {

struct CastSegment {
  const float* source = nullptr;
  int64_t count = 0;   // elements
  int64_t offset = 0;  // where in `out` the cast values go; a multiple of 8
};

// Segments per launch (they travel in the launch's parameters).
constexpr int kMaxCastSegments = 48;

// out[segment.offset + i] = segment.source[i] for every segment, rounded to nearest even.
// `out` is 16-byte aligned.
const char* CastToHalf(const CastSegment* segments, int count, void* out, HalfType type,
                       void* stream);

}  // namespace stoke::worker::cuda
