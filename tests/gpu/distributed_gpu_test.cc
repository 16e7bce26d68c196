// Two ranks on two GPUs through NCCL, each a real process (stoke_rank_runner): after
// training they hold identical parameters, close to one process training on both ranks'
// batches together. Skips without two CUDA devices.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

#include "tests/support/data_files.h"
#include "tests/support/require_cuda.h"
#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"

namespace stoke::testing {
namespace {

std::unique_ptr<BackgroundProcess> StartRank(std::vector<std::string> args,
                                             const std::string& log) {
  args.insert(args.begin(), STOKE_RANK_RUNNER_BINARY);
  return std::make_unique<BackgroundProcess>(args, BackgroundProcess::Options{log});
}

// Two ranks over NCCL against one process on the global batch, with `optimizer` (SGD
// steps after every bucket is reduced; the fused AdamW updates bucket by bucket).
void ExpectTwoGpusMatchOne(const std::string& optimizer, double rtol, double atol) {
  TempDir dir;
  const std::string data = dir.File("data");
  ASSERT_EQ(mkdir(data.c_str(), 0755), 0);
  WriteMnistFolder(data, PatternImages(96, 8, 8, 10), PatternImages(20, 8, 8, 10, 3));
  const std::vector<std::string> common = {"data=" + data, "steps=30", "precision=bf16",
                                           "optimizer=" + optimizer};
  auto with = [&](std::vector<std::string> args) {
    args.insert(args.end(), common.begin(), common.end());
    return args;
  };
  auto single = StartRank(
      with({"rank=0", "world=1", "batch=16", "device=cuda:0", "out=" + dir.File("single.pt")}),
      dir.File("single.log"));
  ASSERT_EQ(single->Wait(), 0) << single->Log();
  const std::string rendezvous = "127.0.0.1:" + std::to_string(FreePort());
  std::vector<std::unique_ptr<BackgroundProcess>> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.push_back(StartRank(with({"rank=" + std::to_string(r), "world=2", "batch=8",
                                    "rendezvous=" + rendezvous, "device=cuda:" + std::to_string(r),
                                    "out=" + dir.File("rank" + std::to_string(r) + ".pt")}),
                              dir.File("rank" + std::to_string(r) + ".log")));
  }
  for (auto& rank : ranks) ASSERT_EQ(rank->Wait(), 0) << rank->Log();
  std::vector<torch::Tensor> a, b, one;
  torch::load(a, dir.File("rank0.pt"));
  torch::load(b, dir.File("rank1.pt"));
  torch::load(one, dir.File("single.pt"));
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(torch::equal(a[i], b[i]))
        << optimizer << ": parameter " << i << " differs across ranks";
    // bf16 products in a different batch split round differently: close, not equal.
    EXPECT_TRUE(torch::allclose(a[i], one[i], rtol, atol))
        << optimizer << ": parameter " << i << ": " << (a[i] - one[i]).abs().max().item<float>();
  }
}

TEST(DistributedGpu, TwoRanksOnTwoGpusEndIdenticalAndCloseToOneProcess) {
  STOKE_SKIP_WITHOUT_CUDA(2);
  ExpectTwoGpusMatchOne("sgd", 2e-2, 2e-3);
}

TEST(DistributedGpu, TwoRanksWithFusedAdamWUpdatingBucketByBucketEndIdentical) {
  STOKE_SKIP_WITHOUT_CUDA(2);
  // AdamW divides by its running gradient scale, so rounding differences weigh more.
  ExpectTwoGpusMatchOne("adamw", 5e-2, 5e-3);
}

}  // namespace
}  // namespace stoke::testing
