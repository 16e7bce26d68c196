// Every device allocation and free of CUDA's caching allocator, recorded from Start on
// and written by Write as PyTorch's memory snapshot (a pickle that
// `torch.cuda.memory._dump_snapshot` would write; bench/python/memory_peak.py reads it):
// to find what is held at a run's peak, block by block, beside a PyTorch script's own
// snapshot. Sizes and order only, no call stacks: recording stays cheap enough for a
// whole benchmark run.
#pragma once

#include <cstdint>
#include <string>

namespace stoke::worker {

class MemoryHistory {
 public:
  // Starts recording (the last `max_events` allocations and frees are kept).
  static void Start(int64_t max_events);
  // Writes what was recorded to `path`, and stops recording. Throws if it cannot.
  static void Write(const std::string& path);
};

}  // namespace stoke::worker
