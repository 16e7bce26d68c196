// A user's torch.nn.Module as a Network: built by their factory in the embedded
// interpreter, its parameters and buffers registered here as the very tensors the Python
// module computes with (the same TensorImpls), so that the C++ loop's optimizer,
// to(device), channels_last, checkpoints and CUDA graph act on what forward reads. Python
// runs only inside the calls below, each holding the GIL just that long; once the step is
// captured as a CUDA graph, not at all.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "worker/common/data_shape.h"
#include "worker/common/task.h"
#include "worker/models/network.h"
#include "worker/python/interpreter.h"

namespace stoke::worker::python {

// Imports ahead of any job what its compile and FLOP count would (glue.py's preload).
void Preload();

class PythonModelImpl : public Network {
 public:
  // Imports the code and calls the factory, on the CPU. Throws UserCodeError with the
  // traceback when the user's code raises, std::invalid_argument when it returns no
  // module. The interpreter must be started.
  PythonModelImpl(const PythonConfig& config, const DataShape& data);
  ~PythonModelImpl() override;

  // module(inputs); it must return one tensor.
  torch::Tensor forward(const torch::Tensor& inputs) override;
  // The compiled module and loss in one call when compiled; loss: model's
  // module(inputs, targets); otherwise none (the loop's C++ loss follows forward).
  std::optional<torch::Tensor> ForwardLoss(const torch::Tensor& inputs,
                                           const torch::Tensor& targets) override;
  int64_t TrainingFlopsPerSample() const override { return flops_; }
  LossKind loss() const override { return config_.loss; }
  bool PrefersChannelsLast() const override { return convolutional_; }
  bool WantsContiguousInputs() const override { return true; }
  // Also module.train(on): dropout and batch norm read the Python module's flag.
  void train(bool on) override;
  std::string SetCompile(CompileMode mode, bool cuda) override;
  Preparation Prepare(const torch::Tensor& inputs, const torch::Tensor& targets) override;
  // state_dict.pt (torch.save of module.state_dict(), on the CPU) and model.safetensors.
  void WriteExports(const std::string& dir) override;

 private:
  // function(inputs[, targets]) as a tensor; `what` names the call in errors.
  torch::Tensor Call(PyObject* function, const torch::Tensor& inputs, const torch::Tensor* targets,
                     const char* what);

  PythonConfig config_;
  PyRef glue_;
  PyRef module_;
  PyRef eager_loss_;
  PyRef compiled_loss_;  // once SetCompile turned it on
  std::string compile_mode_;
  int64_t flops_ = 0;
  bool convolutional_ = false;
};

TORCH_MODULE(PythonModel);

}  // namespace stoke::worker::python
