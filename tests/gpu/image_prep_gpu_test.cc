// Stoke's image prep kernel against ATen's composition of the same steps (widen, /255,
// zero-pad, crop at the drawn offset, mirror where the flip bit is set, normalize) for
// the SAME draws: uint8 images of 1 and 3 channels, square and odd sizes, paddings 0, 2
// and 4, flip and normalization on and off, NCHW and NHWC output. Then BatchPrep on a
// GPU: evaluation batches are the plain widened and normalized images, training batches
// are each one window of their padded self, and the draws of a batch vary. Skips without
// CUDA or without the kernels.
#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <cstdint>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "tests/support/require_cuda.h"
#include "worker/common/task.h"
#include "worker/data/batch_prep.h"
#include "worker/ops/image_prep.h"
#include "worker/ops/step_context.h"

namespace stoke::worker {
namespace {

const auto kCuda = torch::TensorOptions().device(torch::kCUDA);

bool KernelAvailable() {
  if (!torch::cuda::is_available()) return false;
  return ImagePrepUsesOwnKernel(torch::zeros({1, 1, 2, 2}, kCuda.dtype(torch::kUInt8)));
}

#define SKIP_WITHOUT_KERNEL()                                                     \
  do {                                                                            \
    STOKE_SKIP_WITHOUT_CUDA();                                                    \
    if (!KernelAvailable()) GTEST_SKIP() << "built without Stoke's CUDA kernels"; \
  } while (false)

torch::Tensor RandomImages(int64_t n, int64_t c, int64_t h, int64_t w) {
  return torch::randint(0, 256, {n, c, h, w}, kCuda.dtype(torch::kLong)).to(torch::kUInt8);
}

// [1, c, 1, 1] floats on the GPU, as BatchPrep keeps them.
std::pair<torch::Tensor, torch::Tensor> RandomStatistics(int64_t c) {
  return {(torch::rand({c}, kCuda) * 0.4 + 0.2).view({1, c, 1, 1}),
          (torch::rand({c}, kCuda) * 0.2 + 0.2).view({1, c, 1, 1})};
}

// Image i as ATen computes it for crop offset (dy, dx) and flip: [c, h, w].
torch::Tensor Expected(const torch::Tensor& images, int64_t i, int64_t padding, int64_t dy,
                       int64_t dx, bool flip, const torch::Tensor& mean,
                       const torch::Tensor& std_dev) {
  const int64_t h = images.size(2), w = images.size(3);
  const torch::Tensor scaled = images[i].to(torch::kFloat32).div(255.0);
  const torch::Tensor padded =
      torch::constant_pad_nd(scaled, {padding, padding, padding, padding}, 0);
  torch::Tensor window = padded.narrow(1, dy, h).narrow(2, dx, w);
  if (flip) window = window.flip({2});
  if (mean.defined()) window = (window - mean[0]) / std_dev[0];
  return window.contiguous();
}

struct Decoded {
  int64_t dy, dx;
  bool flip;
};

std::vector<Decoded> Decode(const torch::Tensor& draws, int64_t padding) {
  const torch::Tensor host = draws.cpu();
  const int64_t k = 2 * padding + 1;
  std::vector<Decoded> out;
  for (int64_t i = 0; i < host.numel(); ++i) {
    const int64_t r = host[i].item<int64_t>();
    out.push_back({(r / k) % k, r % k, r / (k * k) != 0});
  }
  return out;
}

// c, {h, w}, padding, flip, normalize, channels_last
using Case = std::tuple<int64_t, std::pair<int64_t, int64_t>, int64_t, bool, bool, bool>;

class ImagePrepKernelTest : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override { SKIP_WITHOUT_KERNEL(); }
};

TEST_P(ImagePrepKernelTest, MatchesAtensCompositionForTheSameDraws) {
  const auto [c, size, padding, flip, normalize, channels_last] = GetParam();
  const auto [h, w] = size;
  const int64_t n = 37;
  torch::manual_seed(1000 * c + 100 * padding + h);
  const torch::Tensor images = RandomImages(n, c, h, w);
  const auto [mean, std_dev] = RandomStatistics(c);
  const torch::Tensor none;
  const bool augment = padding > 0 || flip;
  const torch::Tensor draws =
      augment ? DrawCropsAndFlips(n, padding, flip, images.device()) : torch::Tensor();
  const torch::Tensor out = PrepareImages(images, draws, padding, normalize ? mean : none,
                                          normalize ? std_dev : none, channels_last);
  ASSERT_EQ(out.sizes(), images.sizes());
  EXPECT_EQ(out.scalar_type(), torch::kFloat32);
  EXPECT_TRUE(out.is_contiguous(channels_last ? at::MemoryFormat::ChannelsLast
                                              : at::MemoryFormat::Contiguous));

  const std::vector<Decoded> at =
      augment ? Decode(draws, padding) : std::vector<Decoded>(n, Decoded{padding, padding, false});
  std::vector<torch::Tensor> expected;
  for (int64_t i = 0; i < n; ++i) {
    if (!flip) {
      ASSERT_FALSE(at[i].flip) << "a flip was drawn with flipping off";
    }
    expected.push_back(Expected(images, i, padding, at[i].dy, at[i].dx, at[i].flip,
                                normalize ? mean : none, normalize ? std_dev : none));
  }
  const torch::Tensor want = torch::stack(expected);
  // The same fp32 operations, each rounded once, so equal in practice; the tolerance only
  // allows for a LibTorch whose division by 255 rounds differently.
  EXPECT_TRUE(torch::allclose(out, want, /*rtol=*/1e-6, /*atol=*/1e-6))
      << "largest difference " << (out - want).abs().max().item<double>();
}

// A readable name per case (the lambda's commas would split a macro argument).
std::string CaseName(const ::testing::TestParamInfo<Case>& info) {
  const auto [c, size, padding, flip, normalize, channels_last] = info.param;
  return "c" + std::to_string(c) + "_" + std::to_string(size.first) + "x" +
         std::to_string(size.second) + "_p" + std::to_string(padding) + (flip ? "_flip" : "") +
         (normalize ? "_norm" : "") + (channels_last ? "_nhwc" : "");
}

INSTANTIATE_TEST_SUITE_P(Shapes, ImagePrepKernelTest,
                         ::testing::Combine(::testing::Values(int64_t{1}, int64_t{3}),
                                            ::testing::Values(std::pair<int64_t, int64_t>{28, 28},
                                                              std::pair<int64_t, int64_t>{13, 17}),
                                            ::testing::Values(int64_t{0}, int64_t{2}, int64_t{4}),
                                            ::testing::Bool(), ::testing::Bool(),
                                            ::testing::Bool()),
                         CaseName);

TEST(ImagePrepGpu, BatchDrawsCoverEveryOffsetAndFlipAboutHalf) {
  STOKE_SKIP_WITHOUT_CUDA();
  torch::manual_seed(3);
  const int64_t n = 4096, p = 4;
  const std::vector<Decoded> at = Decode(DrawCropsAndFlips(n, p, true, torch::kCUDA), p);
  std::set<std::pair<int64_t, int64_t>> offsets;
  int64_t flips = 0;
  for (const Decoded& d : at) {
    ASSERT_TRUE(d.dy >= 0 && d.dy <= 2 * p && d.dx >= 0 && d.dx <= 2 * p);
    offsets.insert({d.dy, d.dx});
    flips += d.flip ? 1 : 0;
  }
  EXPECT_EQ(offsets.size(), static_cast<size_t>((2 * p + 1) * (2 * p + 1)));
  EXPECT_GT(flips, n * 4 / 10);
  EXPECT_LT(flips, n * 6 / 10);
}

AugmentConfig Augment(int64_t padding, bool flip) {
  AugmentConfig augment;
  augment.crop_padding = padding;
  augment.horizontal_flip = flip;
  augment.normalize = true;
  return augment;
}

std::vector<double> ToVector(const torch::Tensor& t) {
  const torch::Tensor host = t.flatten().to(torch::kDouble).cpu().contiguous();
  return {host.data_ptr<double>(), host.data_ptr<double>() + host.numel()};
}

TEST(ImagePrepGpu, EvaluationBatchesAreTheWidenedNormalizedImages) {
  SKIP_WITHOUT_KERNEL();
  torch::manual_seed(5);
  const torch::Tensor images = RandomImages(37, 3, 13, 17);
  const auto [mean, std_dev] = RandomStatistics(3);
  BatchPrep prep = BatchPrep::ForImages(Augment(4, true), ToVector(mean), ToVector(std_dev),
                                        torch::Device(torch::kCUDA));
  const torch::Tensor targets = torch::arange(37, kCuda.dtype(torch::kLong));
  const torch::Tensor want = (images.to(torch::kFloat32).div(255.0) - mean) / std_dev;
  for (const bool channels_last : {false, true}) {
    prep.set_channels_last(channels_last);
    const Batch batch = prep(images, targets, /*train=*/false);
    EXPECT_TRUE(batch.inputs.is_contiguous(channels_last ? at::MemoryFormat::ChannelsLast
                                                         : at::MemoryFormat::Contiguous));
    EXPECT_TRUE(torch::allclose(batch.inputs, want, 1e-6, 1e-6))
        << "largest difference " << (batch.inputs - want).abs().max().item<double>();
    EXPECT_TRUE(torch::equal(batch.targets, targets));
  }
}

TEST(ImagePrepGpu, TrainingBatchesAreEachAWindowOfTheirPaddedImageAndVary) {
  SKIP_WITHOUT_KERNEL();
  torch::manual_seed(7);
  const int64_t n = 37, p = 2;
  // One image for the whole batch: differences between samples are the draws'.
  const torch::Tensor images = RandomImages(1, 3, 28, 28).expand({n, 3, 28, 28}).contiguous();
  const auto [mean, std_dev] = RandomStatistics(3);
  BatchPrep prep = BatchPrep::ForImages(Augment(p, true), ToVector(mean), ToVector(std_dev),
                                        torch::Device(torch::kCUDA));
  prep.set_channels_last(true);
  const torch::Tensor out =
      prep(images, torch::zeros({n}, kCuda.dtype(torch::kLong)), true).inputs.contiguous().cpu();
  std::vector<torch::Tensor> candidates;
  std::vector<Decoded> placements;
  for (int64_t dy = 0; dy <= 2 * p; ++dy) {
    for (int64_t dx = 0; dx <= 2 * p; ++dx) {
      for (const bool flip : {false, true}) {
        candidates.push_back(Expected(images, 0, p, dy, dx, flip, mean, std_dev).cpu());
        placements.push_back({dy, dx, flip});
      }
    }
  }
  std::set<std::tuple<int64_t, int64_t, bool>> seen;
  for (int64_t i = 0; i < n; ++i) {
    int matches = 0;
    for (size_t k = 0; k < candidates.size(); ++k) {
      if (torch::allclose(out[i], candidates[k], 1e-6, 1e-6)) {
        ++matches;
        seen.insert({placements[k].dy, placements[k].dx, placements[k].flip});
      }
    }
    EXPECT_EQ(matches, 1) << "image " << i << " is not one window of its padded input";
  }
  // 50 placements for 37 images: one or two for all would not be random.
  EXPECT_GT(seen.size(), 5u);
}

TEST(ImagePrepGpu, NotTakenWhereOwnKernelsAreOffOrTheInputIsNotBytes) {
  SKIP_WITHOUT_KERNEL();
  const torch::Tensor images = RandomImages(4, 1, 8, 8);
  EXPECT_FALSE(ImagePrepUsesOwnKernel(images.to(torch::kFloat32)));
  EXPECT_FALSE(ImagePrepUsesOwnKernel(images.cpu()));
  StepContext context(/*own_kernels_allowed=*/false);
  const StepContextScope scope(&context);
  EXPECT_FALSE(ImagePrepUsesOwnKernel(images));
  // BatchPrep then takes ATen's composition, with the same result.
  BatchPrep prep =
      BatchPrep::ForImages(Augment(2, true), {0.5}, {0.25}, torch::Device(torch::kCUDA));
  const torch::Tensor want = (images.to(torch::kFloat32).div(255.0) - 0.5) / 0.25;
  const torch::Tensor got =
      prep(images, torch::zeros({4}, kCuda.dtype(torch::kLong)), false).inputs;
  EXPECT_TRUE(torch::allclose(got, want, 1e-6, 1e-6));
}

}  // namespace
}  // namespace stoke::worker
