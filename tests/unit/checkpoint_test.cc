// Checkpoints on a disk that fills up mid-write: the write fails naming the checkpoint
// and the cause, and the checkpoint before it is still the newest complete one and
// restores the state it saved. The full disk is real: the file being written is
// /dev/full, which refuses every write with ENOSPC as a full file system does.
#include "worker/engine/checkpoint.h"

#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <iostream>
#include <string>

#include "files/posix_files.h"
#include "tests/support/temp_dir.h"
#include "worker/models/model_factory.h"

namespace stoke::worker {
namespace {

using stoke::testing::TempDir;

std::shared_ptr<Network> SmallMlp() {
  MlpConfig config;
  config.hidden = {16};
  return BuildNetwork(config, DataShape{DataShape::Kind::kVector, {8}, 4, 0, {}});
}

TEST(Checkpointer, AFullDiskFailsTheWriteNamingItAndKeepsTheCheckpointBefore) {
  if (access("/dev/full", W_OK) != 0) GTEST_SKIP() << "no writable /dev/full";
  TempDir dir;
  const Checkpointer checkpoints(dir.path(), /*keep=*/2);
  auto net = SmallMlp();
  torch::optim::SGD optimizer(net->parameters(), torch::optim::SGDOptions(0.1));
  const DeviceRef cpu;
  checkpoints.Save(100, *net, optimizer, cpu);
  const torch::Tensor saved = net->parameters()[0].detach().clone();

  // The weights move on; the next checkpoint's model file lands on a full disk.
  {
    torch::NoGradGuard no_grad;
    for (auto& p : net->parameters()) p.add_(1.0);
  }
  const std::string temporary = dir.path() + "/checkpoints/.tmp-200-" + std::to_string(getpid());
  std::string error;
  ASSERT_TRUE(files::MakeDirectories(temporary, &error)) << error;
  ASSERT_EQ(symlink("/dev/full", (temporary + "/model.pt").c_str()), 0);
  try {
    checkpoints.Save(200, *net, optimizer, cpu);
    FAIL() << "a checkpoint was written to a full disk";
  } catch (const std::runtime_error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("cannot write checkpoint " + dir.path() + "/checkpoints/step-200"),
              std::string::npos)
        << message;
    EXPECT_NE(message.find("No space left on device"), std::string::npos) << message;
    std::cout << "the error: " << message << "\n";
  }

  // Nothing half-written is left, and step 100 is what a restart resumes from.
  const auto all = checkpoints.List();
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].step, 100u);
  EXPECT_FALSE(files::Exists(temporary)) << "the failed write left " << temporary;
  auto fresh = SmallMlp();
  torch::optim::SGD fresh_optimizer(fresh->parameters(), torch::optim::SGDOptions(0.1));
  EXPECT_EQ(checkpoints.Restore(all[0], *fresh, fresh_optimizer, cpu), 100u);
  EXPECT_TRUE(torch::equal(fresh->parameters()[0], saved));
}

}  // namespace
}  // namespace stoke::worker
