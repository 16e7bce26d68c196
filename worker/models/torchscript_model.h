// A user's own model, saved as TorchScript (torch.jit.script(...).save(path) in Python or
// torch::jit::Module::save in C++), trained like any built-in one. The wrapper registers
// the scripted module's own parameter and buffer tensors, so the optimizer, to(device),
// checkpoints and the parameter count all act on what the module computes with.
#pragma once

#include <torch/csrc/jit/api/module.h>

#include <cstdint>

#include "formats/read_options.h"
#include "worker/common/task.h"
#include "worker/models/network.h"

namespace stoke::worker {

class TorchScriptModelImpl : public Network {
 public:
  // Loads config.path onto the CPU, through a descriptor opened beneath files.roots (when
  // set) that is never a FIFO or device. Throws std::invalid_argument
  // ("model.torchscript.path: <path>: <reason>") when it is no model, and StatusError
  // with the opener's code (NOT_FOUND: may yet appear) when it cannot be opened.
  explicit TorchScriptModelImpl(const TorchScriptConfig& config,
                                const data::ReadOptions& files = {});
  // The scripted module's forward on the batch; it must return one tensor.
  torch::Tensor forward(const torch::Tensor& inputs) override;
  int64_t TrainingFlopsPerSample() const override { return flops_; }
  LossKind loss() const override { return config_.loss; }
  // Also switches the scripted module, whose forward may read `self.training` (dropout,
  // batch norm).
  void train(bool on = true) override;
  // model.torchscript.pt: the scripted module with the trained weights, on the CPU, so
  // that torch.jit.load(path)(inputs) runs it anywhere.
  void WriteExports(const std::string& dir) override;

 private:
  TorchScriptConfig config_;
  torch::jit::Module module_;
  int64_t flops_ = 0;
};

TORCH_MODULE(TorchScriptModel);

}  // namespace stoke::worker
