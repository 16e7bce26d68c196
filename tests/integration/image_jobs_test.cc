// data.images as a team would use it: folders of JPEGs and PNGs (Fashion-MNIST pictures
// written with Pillow at 40 x 40, one JPEG cut off) and manifests of them, trained through
// `stoke submit` on a real coordinator's CPU worker. The damaged file is skipped and
// counted (stoke status, /metrics); a folder Stoke cannot take is refused at submission,
// naming the field, and nothing is stored for it.
#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "tests/support/cli_job_suite.h"
#include "tests/support/http_get.h"

namespace stoke::testing {
namespace {

class ImageJobsTest : public CliJobSuite {
 protected:
  static std::string Images() { return DataDir() + "/datasets/images"; }

  static void SetUpTestSuite() {
    DataMade(RunCommand(
        {"/usr/bin/python3", std::string(STOKE_SOURCE_DIR) + "/examples/images/make_images.py",
         "folder", Images(), "200", "--size", "40", "--png-every", "7", "--damaged", "1"}));
  }

  std::string Job(const std::string& images, int steps) {
    std::string path = files_.File("job.yaml");
    std::ofstream(path) << "name: images\nmodel: {cnn: {channels: [16, 32], hidden: 64}}\n"
                        << "data:\n  images: {" << images
                        << ", size: 32, channels: 1, min_crop_area: 0.5}\n"
                        << "  augment: {horizontal_flip: true}\n"
                        << "optimizer: {adamw: {}, lr: 0.002}\n"
                        << "training: {steps: " << steps << ", batch_size: 64}\n"
                        << "metrics: {interval_steps: 25}\n";
    return path;
  }
};

TEST_F(ImageJobsTest, AFolderOfJpegsAndPngsTrainsAndItsDamagedFileIsSkippedAndCounted) {
  const CommandResult run =
      Stoke({"submit", Job("path: " + Images() + "/train, val_path: " + Images() + "/val", 300),
             "--watch"});
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err << coordinator().Log();
  std::smatch eval;
  ASSERT_TRUE(std::regex_search(
      run.out, eval,
      std::regex(
          R"(job (\d+) eval at step 300: loss [0-9.]+, accuracy ([0-9.]+)% on 400 held-out)")))
      << run.out;
  // 2,000 pictures of 10 kinds, cropped and resized as they are read.
  EXPECT_GT(std::stod(eval[2]), 70.0) << eval[0];
  const std::string id = eval[1];
  // 300 batches of 64 read each of the 2,000 files about ten times: the cut-off one too.
  const CommandResult status = Stoke({"status", id});
  EXPECT_NE(status.out.find("damaged samples skipped"), std::string::npos) << status.out;
  EXPECT_NE(Stoke({"logs", id}).out.find("samples skipped so far"), std::string::npos);
  std::string metrics_address;
  std::ifstream(DataDir() + "/metrics.address") >> metrics_address;
  const std::string text = HttpGet(metrics_address, "/metrics");
  EXPECT_GE(SampleValue(text, "stoke_job_samples_skipped_total{job_id=\"" + id + "\"}"), 1) << text;
}

TEST_F(ImageJobsTest, ManifestsInCsvAndJsonLinesTrainWithAShareHeldOut) {
  for (const char* manifest : {"train.csv", "train.jsonl"}) {
    const CommandResult run =
        Stoke({"submit", Job("manifest: " + Images() + "/" + manifest, 40), "--watch"});
    ASSERT_EQ(run.exit_code, 0) << manifest << run.out << run.err;
    // Every tenth of the 2,000 images held out.
    EXPECT_NE(run.out.find("on 200 held-out samples"), std::string::npos) << manifest << run.out;
  }
}

TEST_F(ImageJobsTest, FoldersStokeCannotTakeAreRefusedAtSubmissionNamingTheField) {
  const std::string before = StoredJobs();
  const CommandResult one_class = Stoke({"submit", Job("path: " + Images() + "/train/bag", 10)});
  EXPECT_EQ(one_class.exit_code, 2);
  EXPECT_NE(one_class.err.find("data.images.path: " + Images() + "/train/bag: holds 0 class"),
            std::string::npos)
      << one_class.err;
  const CommandResult outside = Stoke({"submit", Job("path: /usr/share", 10)});
  EXPECT_EQ(outside.exit_code, 2);
  EXPECT_NE(
      outside.err.find("data.images.path: /usr/share is outside the coordinator's data roots"),
      std::string::npos)
      << outside.err;
  std::ofstream(Images() + "/bad.csv") << "path,label\ntrain/x.txt,1\n";
  const CommandResult manifest = Stoke({"submit", Job("manifest: " + Images() + "/bad.csv", 10)});
  EXPECT_NE(manifest.err.find("data.images.manifest: " + Images() +
                              "/bad.csv:2: train/x.txt: not a "
                              ".jpg or .png file"),
            std::string::npos)
      << manifest.err;
  EXPECT_EQ(StoredJobs(), before) << "a refused job was stored";
}

}  // namespace
}  // namespace stoke::testing
