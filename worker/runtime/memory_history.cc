#include "worker/runtime/memory_history.h"

#include <cstdint>
#include <fstream>
#include <stdexcept>

#include "worker/runtime/torch_compat.h"

// torch 2.1 gave the C++ recorder a trace of every allocation; 1.13's records segments only.
#if STOKE_WITH_CUDA && STOKE_TORCH_AT_LEAST(2, 1) && __has_include(<torch/csrc/cuda/memory_snapshot.h>)
#include <torch/csrc/cuda/memory_snapshot.h>
#define STOKE_MEMORY_HISTORY 1
#else
#define STOKE_MEMORY_HISTORY 0
#endif

namespace stoke::worker {

void MemoryHistory::Start(int64_t max_events) {
#if STOKE_MEMORY_HISTORY
  torch::cuda::_record_memory_history(/*enabled=*/true, /*record_context=*/false, max_events);
#else
  (void)max_events;
  throw std::runtime_error("memory history: needs a CUDA build of LibTorch 2.1 or later");
#endif
}

void MemoryHistory::Write(const std::string& path) {
#if STOKE_MEMORY_HISTORY
  const std::string snapshot = torch::cuda::_memory_snapshot_pickled();
  torch::cuda::_record_memory_history(/*enabled=*/false);
  std::ofstream out(path, std::ios::binary);
  out.write(snapshot.data(), static_cast<std::streamsize>(snapshot.size()));
  if (!out) throw std::runtime_error("memory history: cannot write " + path);
#else
  (void)path;
  throw std::runtime_error("memory history: needs a CUDA build of LibTorch 2.1 or later");
#endif
}

}  // namespace stoke::worker
