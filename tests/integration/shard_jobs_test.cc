// data.shards as a team would use it: Fashion-MNIST pictures (one JPEG cut off) packed
// into WebDataset tar shards with examples/shards/make_shards.py, trained through `stoke
// submit` on a real coordinator's CPU worker; a missing, damaged or foreign shard is
// refused at submission naming the field and the file, and nothing is stored for it.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <utility>
#include <vector>

#include "tests/support/cli_job_suite.h"

namespace stoke::testing {
namespace {

const std::string kExamples = std::string(STOKE_SOURCE_DIR) + "/examples";

class ShardJobsTest : public CliJobSuite {
 protected:
  static std::string Data() { return DataDir() + "/datasets"; }

  static void SetUpTestSuite() {
    const std::string images = Data() + "/images";
    CommandResult made = RunCommand({"/usr/bin/python3", kExamples + "/images/make_images.py",
                                     "folder", images, "200", "--size", "40", "--damaged", "1"});
    for (const char* split : {"train", "val"}) {
      if (made.exit_code != 0) break;
      made = RunCommand({"/usr/bin/python3", kExamples + "/shards/make_shards.py",
                         images + "/" + split, Data() + "/shards/" + split, "--per-shard", "500"});
    }
    DataMade(std::move(made));
  }

  std::string Job(const std::string& shards, int steps) {
    std::string path = files_.File("job.yaml");
    std::ofstream(path) << "name: shards\nmodel: {cnn: {channels: [16, 32], hidden: 64}}\n"
                        << "data:\n  shards: {" << shards
                        << ", size: 32, channels: 1, min_crop_area: 0.5, shuffle_buffer: 500}\n"
                        << "  augment: {horizontal_flip: true}\n"
                        << "optimizer: {adamw: {}, lr: 0.002}\n"
                        << "training: {steps: " << steps << ", batch_size: 64}\n"
                        << "metrics: {interval_steps: 25}\n";
    return path;
  }
};

TEST_F(ShardJobsTest, StreamedShardsTrainAndTheirDamagedImageIsSkippedAndCounted) {
  const CommandResult run = Stoke({"submit",
                                   Job("urls: '" + Data() + "/shards/train-{0000..0003}.tar', " +
                                           "val_urls: " + Data() + "/shards/val-0000.tar",
                                       300),
                                   "--watch"});
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err << coordinator().Log();
  std::smatch eval;
  ASSERT_TRUE(std::regex_search(
      run.out, eval,
      std::regex(
          R"(job (\d+) eval at step 300: loss [0-9.]+, accuracy ([0-9.]+)% on 400 held-out)")))
      << run.out;
  // The same 2,000 pictures data.images trains on to over 70%, read from four shards.
  EXPECT_GT(std::stod(eval[2]), 70.0) << eval[0];
  const CommandResult status = Stoke({"status", eval[1]});
  EXPECT_NE(status.out.find("damaged samples skipped"), std::string::npos) << status.out;
}

TEST_F(ShardJobsTest, MissingDamagedAndForeignShardsAreRefusedAtSubmissionNamingThem) {
  const std::string before = StoredJobs();
  const std::string shards = Data() + "/shards";
  const CommandResult missing =
      Stoke({"submit", Job("urls: '" + shards + "/train-{0..9}.tar'", 10)});
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_NE(missing.err.find("data.shards.urls: " + shards + "/train-0.tar"), std::string::npos)
      << missing.err;
  // A copy of a shard cut short in its third member.
  std::filesystem::copy_file(shards + "/train-0000.tar", shards + "/cut.tar");
  std::filesystem::resize_file(shards + "/cut.tar", 3000);
  const CommandResult cut = Stoke({"submit", Job("urls: " + shards + "/cut.tar", 10)});
  EXPECT_EQ(cut.exit_code, 2);
  EXPECT_NE(cut.err.find("data.shards.urls: " + shards + "/cut.tar: damaged tar at byte"),
            std::string::npos)
      << cut.err;
  std::ofstream(shards + "/text.tar") << "not a tar file at all";
  const CommandResult text = Stoke({"submit", Job("urls: " + shards + "/text.tar", 10)});
  EXPECT_NE(text.err.find(shards + "/text.tar: not a tar file"), std::string::npos) << text.err;
  const CommandResult pattern =
      Stoke({"submit", Job("urls: '" + shards + "/train-{0003..0000}.tar'", 10)});
  EXPECT_NE(
      pattern.err.find("data.shards.urls: " + shards + "/train-{0003..0000}.tar: {0003..0000}"),
      std::string::npos)
      << pattern.err;
  const CommandResult outside = Stoke({"submit", Job("urls: '/usr/share/x-{0..1}.tar'", 10)});
  EXPECT_NE(outside.err.find("data.shards.urls: /usr/share/x-0.tar"), std::string::npos)
      << outside.err;
  EXPECT_EQ(StoredJobs(), before) << "a refused job was stored";
}

}  // namespace
}  // namespace stoke::testing
