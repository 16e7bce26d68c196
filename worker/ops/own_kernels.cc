#include "worker/ops/own_kernels.h"

#include <atomic>

namespace stoke::worker {
namespace {

std::atomic<bool>& Allowed() {
  static std::atomic<bool> allowed{true};
  return allowed;
}

}  // namespace

bool OwnKernelsAllowed() { return Allowed().load(std::memory_order_relaxed); }

OwnKernelsSetting::OwnKernelsSetting(bool allowed) : previous_(Allowed().exchange(allowed)) {}

OwnKernelsSetting::~OwnKernelsSetting() { Allowed().store(previous_); }

}  // namespace stoke::worker
