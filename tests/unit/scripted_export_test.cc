// Each built-in network's TorchScript export computes what the network computes in eval
// mode, loaded back by the TorchScript runtime alone (as torch.jit.load does in Python),
// with parameters and batch-norm statistics that are not their initial values.
#include <gtest/gtest.h>
#include <torch/script.h>
#include <torch/torch.h>

#include <string>
#include <vector>

#include "tests/support/temp_dir.h"
#include "worker/models/model_factory.h"
#include "worker/models/scripted_export.h"

namespace stoke::worker {
namespace {

DataShape Images(int64_t c, int64_t h, int64_t w, int64_t classes) {
  return DataShape{DataShape::Kind::kImage, {c, h, w}, classes, 0, {}};
}

// As if trained: every parameter and running statistic moved off its initial value
// (running variances kept positive), so that an export that read the wrong tensor, or
// none, would not agree by chance.
void Perturb(Network& net) {
  torch::NoGradGuard no_grad;
  torch::manual_seed(7);
  for (auto& p : net.parameters()) p.add_(torch::randn_like(p) * 0.05);
  for (const auto& buffer : net.named_buffers()) {
    torch::Tensor b = buffer.value();
    if (!b.is_floating_point()) continue;
    if (buffer.key().find("running_var") != std::string::npos) {
      b.uniform_(0.5, 2.0);
    } else {
      b.normal_(0.0, 0.1);
    }
  }
}

// The export's forward against the network's, in eval mode, on `inputs`.
void ExpectExportComputesForward(Network& net, const torch::Tensor& inputs) {
  Perturb(net);
  net.eval();
  torch::NoGradGuard no_grad;
  const torch::Tensor expected = net.forward(inputs);
  testing::TempDir dir;
  net.WriteExports(dir.path());
  torch::jit::Module exported = torch::jit::load(ScriptedExportPath(dir.path()));
  const torch::Tensor got = exported.forward({inputs}).toTensor();
  ASSERT_EQ(got.sizes(), expected.sizes());
  EXPECT_TRUE(torch::allclose(got, expected, /*rtol=*/1e-4, /*atol=*/1e-5))
      << "largest difference " << (got - expected).abs().max().item<double>();
  // Every trained tensor travels, under its name with underscores.
  size_t parameters = 0;
  for (const auto& p : exported.named_parameters(/*recurse=*/false)) {
    (void)p;
    ++parameters;
  }
  EXPECT_EQ(parameters, net.parameters().size());
}

TEST(ScriptedExport, MlpWithEachActivation) {
  for (Activation activation : {Activation::kRelu, Activation::kGelu, Activation::kTanh}) {
    MlpConfig config;
    config.hidden = {32, 16};
    config.activation = activation;
    config.dropout = 0.3;  // inactive in eval mode, on both sides
    auto net = BuildNetwork(config, Images(1, 6, 6, 5));
    ExpectExportComputesForward(*net, torch::randn({3, 1, 6, 6}));
  }
}

TEST(ScriptedExport, Cnn) {
  CnnConfig config;
  config.channels = {4, 8};
  config.hidden = 16;
  auto net = BuildNetwork(config, Images(1, 12, 12, 10));
  ExpectExportComputesForward(*net, torch::randn({3, 1, 12, 12}));
}

TEST(ScriptedExport, ResNetsWithBothStemsAndBottlenecks) {
  ResNetConfig basic;  // depth 18; the small stem on 16x16
  auto small = BuildNetwork(basic, Images(3, 16, 16, 4));
  ExpectExportComputesForward(*small, torch::randn({2, 3, 16, 16}));
  ResNetConfig bottleneck;
  bottleneck.depth = 50;
  bottleneck.small_stem = false;  // the 7x7 stride-2 stem and the max-pool
  auto large = BuildNetwork(bottleneck, Images(3, 72, 72, 7));
  ExpectExportComputesForward(*large, torch::randn({2, 3, 72, 72}));
}

TEST(ScriptedExport, GptOnFewerTokensThanItsContext) {
  GptConfig config;
  config.layers = 2;
  config.heads = 4;
  config.width = 32;
  auto net = BuildNetwork(config, DataShape{DataShape::Kind::kTokens, {16}, 0, 50, {}});
  ExpectExportComputesForward(*net, torch::randint(0, 50, {2, 16}));
  ExpectExportComputesForward(*net, torch::randint(0, 50, {3, 5}));
}

TEST(ScriptedExport, FloatsReadBackExactly) {
  EXPECT_EQ(ScriptFloat(1.0), "1.0");
  EXPECT_EQ(std::stod(ScriptFloat(1e-5)), 1e-5);
  EXPECT_EQ(std::stod(ScriptFloat(0.1767766952966369)), 0.1767766952966369);
  EXPECT_EQ(ScriptTensor("blocks.0.qkv.weight"), "self.blocks_0_qkv_weight");
}

}  // namespace
}  // namespace stoke::worker
