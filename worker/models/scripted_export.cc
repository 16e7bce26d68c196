#include "worker/models/scripted_export.h"

#include <torch/csrc/jit/api/module.h>

#include <algorithm>
#include <iomanip>
#include <limits>
#include <sstream>

namespace stoke::worker {
namespace {

std::string AttributeName(std::string dotted_name) {
  std::replace(dotted_name.begin(), dotted_name.end(), '.', '_');
  return dotted_name;
}

}  // namespace

std::string ScriptTensor(const std::string& dotted_name) {
  return "self." + AttributeName(dotted_name);
}

std::string ScriptFloat(double value) {
  std::ostringstream out;
  out << std::setprecision(std::numeric_limits<double>::max_digits10) << value;
  std::string text = out.str();
  // "1" would be an int to TorchScript, where the operations want a float.
  if (text.find_first_of(".en") == std::string::npos) text += ".0";
  return text;
}

std::string ScriptConv2d(const std::string& x, const std::string& conv, int64_t stride,
                         int64_t padding) {
  const std::string s = std::to_string(stride), p = std::to_string(padding);
  return "torch.conv2d(" + x + ", " + ScriptTensor(conv + ".weight") + ", None, [" + s + ", " + s +
         "], [" + p + ", " + p + "])";
}

std::string ScriptBatchNorm(const std::string& x, const std::string& norm, double eps) {
  return "torch.batch_norm(" + x + ", " + ScriptTensor(norm + ".weight") + ", " +
         ScriptTensor(norm + ".bias") + ", " + ScriptTensor(norm + ".running_mean") + ", " +
         ScriptTensor(norm + ".running_var") + ", False, 0.0, " + ScriptFloat(eps) + ", True)";
}

void SaveScriptedNetwork(const torch::nn::Module& network, const std::string& class_name,
                         const std::string& source, const std::string& path) {
  torch::NoGradGuard no_grad;
  torch::jit::Module scripted("__torch__.stoke." + class_name);
  // Copies on the CPU, contiguous: the trained tensors may be channels-last on a GPU.
  auto copy = [](const torch::Tensor& t) { return t.detach().to(torch::kCPU).contiguous(); };
  for (const auto& parameter : network.named_parameters()) {
    torch::Tensor tensor = copy(parameter.value());
    tensor.set_requires_grad(parameter.value().requires_grad());
    scripted.register_parameter(AttributeName(parameter.key()), tensor, /*is_buffer=*/false);
  }
  for (const auto& buffer : network.named_buffers()) {
    scripted.register_buffer(AttributeName(buffer.key()), copy(buffer.value()));
  }
  scripted.define(source);
  scripted.eval();
  scripted.save(path);
}

}  // namespace stoke::worker
