// TorchScript models: loading, sharing the scripted module's tensors with the wrapper, and
// forwarding train/eval and forward calls to it.
#include "worker/models/torchscript_model.h"

#include <torch/csrc/jit/serialization/import.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <string>
#include <unordered_set>
#include <vector>

namespace stoke::worker {
namespace {

[[noreturn]] void Fail(const std::string& path, const std::string& reason) {
  throw std::invalid_argument("model.torchscript.path: " + path + ": " + reason);
}

torch::jit::Module Load(const std::string& path) {
  if (path.empty()) Fail(path, "not set");
  // Opening it first gives the plain reason (no such file, permission denied) rather
  // than the zip reader's message and a C++ backtrace.
  if (!std::ifstream(path, std::ios::binary)) Fail(path, std::strerror(errno));
  try {
    // Onto the CPU, whatever device it was saved from: the trainer moves the model to its
    // own device, and a module saved on a GPU must still load on a machine without one.
    return torch::jit::load(path, torch::Device(torch::kCPU));
  } catch (const c10::Error& e) {
    Fail(path, e.what_without_backtrace());
  }
}

// torch::nn::Module names may not contain '.', which joins a scripted module's nested
// names ("encoder.weight").
std::string FlatName(std::string name) {
  std::replace(name.begin(), name.end(), '.', '_');
  return name;
}

}  // namespace

TorchScriptModelImpl::TorchScriptModelImpl(const TorchScriptConfig& config)
    : config_(config), module_(Load(config.path)) {
  int64_t count = 0;
  // A tensor the module shares between two submodules (tied weights) is registered once,
  // or the optimizer would step it twice.
  std::unordered_set<const void*> seen;
  for (const auto& p : module_.named_parameters(/*recurse=*/true)) {
    if (!seen.insert(p.value.unsafeGetTensorImpl()).second) continue;
    // The same tensor, not a copy: what the optimizer steps and to(device) moves is what
    // the scripted forward reads. Every parameter is trained: one registered from C++ as
    // a plain tensor has requires_grad off, which would silently freeze it.
    register_parameter(FlatName(p.name), p.value, /*requires_grad=*/true);
    count += p.value.numel();
  }
  for (const auto& b : module_.named_buffers(/*recurse=*/true)) {
    if (seen.insert(b.value.unsafeGetTensorImpl()).second) {
      register_buffer(FlatName(b.name), b.value);
    }
  }
  // An approximation: nothing says how often an arbitrary module uses each weight. A
  // dense layer uses each once per sample, 2 FLOPs forward and 4 backward; convolutions
  // and recurrences use theirs many times, so this undercounts them.
  flops_ = 6 * count;
}

torch::Tensor TorchScriptModelImpl::forward(const torch::Tensor& inputs) {
  const c10::IValue out = module_.forward(std::vector<c10::IValue>{inputs});
  TORCH_CHECK(out.isTensor(), "model.torchscript: forward returned ", out.tagKind(),
              ", not a tensor");
  return out.toTensor();
}

void TorchScriptModelImpl::train(bool on) {
  Network::train(on);
  // Not module_.train(): it asserts that every submodule has a `training` attribute, and
  // a module built from C++ (torch::jit::Module's constructor) has none.
  for (torch::jit::Module m : module_.modules()) {
    if (m.hasattr("training")) m.setattr("training", on);
  }
}

}  // namespace stoke::worker
