// Built-in networks exported as TorchScript, so that torch.jit.load(path)(inputs) computes
// what the network's forward computes in eval mode, with PyTorch alone. Stoke's own
// kernels stay out of it: each network writes its forward as TorchScript source of plain
// ATen operations over its tensors, which become the module's attributes under their names
// with dots as underscores ("blocks.0.qkv.weight" is self.blocks_0_qkv_weight).
#pragma once

#include <torch/nn/module.h>

#include <cstdint>
#include <string>

namespace stoke::worker {

// How the source names the tensor `dotted_name` of the network: "self.blocks_0_qkv_weight".
std::string ScriptTensor(const std::string& dotted_name);

// A double as TorchScript reads it back exactly ("1.0000000000000001e-05").
std::string ScriptFloat(double value);

// Source expressions for the layers the convolutional networks share, given the input
// expression and the module's dotted name: a convolution without bias, and batch norm
// with its running statistics (eval mode).
std::string ScriptConv2d(const std::string& x, const std::string& conv, int64_t stride,
                         int64_t padding);
std::string ScriptBatchNorm(const std::string& x, const std::string& norm, double eps);

// Writes `network`'s parameters and buffers (on the CPU) and `source` (TorchScript defs,
// forward among them) as a TorchScript module named `class_name` at `path`. Throws what
// compiling the source or writing the file throws.
void SaveScriptedNetwork(const torch::nn::Module& network, const std::string& class_name,
                         const std::string& source, const std::string& path);

// model.torchscript.pt in a checkpoint's folder.
inline std::string ScriptedExportPath(const std::string& dir) {
  return dir + "/model.torchscript.pt";
}

}  // namespace stoke::worker
