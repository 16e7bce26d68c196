// data.shards as a team would use it: Fashion-MNIST pictures (one JPEG cut off) packed
// into WebDataset tar shards with examples/shards/make_shards.py, trained through `stoke
// submit` on a real coordinator's CPU worker; a missing, damaged or foreign shard is
// refused at submission naming the field and the file, and nothing is stored for it.
// Shards of .npy arrays train Stoke's MLP, and shards of .txt texts a Python model that
// embeds their byte ids.
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
    if (made.exit_code == 0) made = MakeMemberShards();
    DataMade(std::move(made));
  }

  // Four shards of 100 samples each in three classes: npy-N.tar holds float32 [16]
  // features about a point per class; txt-N.tar texts of 3 to 8 words from a vocabulary
  // per class.
  static CommandResult MakeMemberShards() {
    return RunCommand({"/usr/bin/python3", "-c", R"(
import io, sys, tarfile, numpy as np
d = sys.argv[1]
rng = np.random.default_rng(5)
centres = rng.normal(size=(3, 16)).astype(np.float32) * 2
words = [["apple", "pear", "plum", "fig"], ["rock", "stone", "sand", "clay"],
         ["rain", "snow", "hail", "mist"]]
def add(t, name, data):
    i = tarfile.TarInfo(name); i.size = len(data); t.addfile(i, io.BytesIO(data))
for s in range(4):
    with tarfile.open(f"{d}/npy-{s}.tar", "w") as a, tarfile.open(f"{d}/txt-{s}.tar", "w") as t:
        for j in range(100):
            k = s * 100 + j; c = int(rng.integers(3))
            b = io.BytesIO(); np.save(b, centres[c] + rng.normal(size=16).astype(np.float32))
            add(a, f"{k:05d}.npy", b.getvalue()); add(a, f"{k:05d}.cls", str(c).encode())
            text = " ".join(rng.choice(words[c], size=int(rng.integers(3, 9))))
            add(t, f"{k:05d}.txt", text.encode()); add(t, f"{k:05d}.cls", str(c).encode())
)",
                       Data() + "/shards"});
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

// The accuracy of a job's last evaluation, from `stoke submit --watch`'s output.
double LastAccuracy(const std::string& out) {
  std::smatch eval;
  std::string rest = out;
  double accuracy = -1;
  while (std::regex_search(rest, eval, std::regex(R"(accuracy ([0-9.]+)%)"))) {
    accuracy = std::stod(eval[1]);
    rest = eval.suffix();
  }
  return accuracy;
}

TEST_F(ShardJobsTest, NpyShardsTrainAnMlpOnTheirArrays) {
  std::ofstream(files_.File("npy.yaml"))
      << "name: npy-shards\nmodel: {mlp: {hidden: [32]}}\n"
      << "data:\n  shards: {urls: '" << Data() << "/shards/npy-{0..3}.tar'}\n"
      << "training: {steps: 120, batch_size: 32}\nmetrics: {interval_steps: 40}\n";
  const CommandResult run = Stoke({"submit", files_.File("npy.yaml"), "--watch"});
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err << coordinator().Log();
  EXPECT_NE(run.out.find("on 40 held-out"), std::string::npos) << run.out;
  EXPECT_GT(LastAccuracy(run.out), 90.0) << run.out;
}

TEST_F(ShardJobsTest, TxtShardsTrainAPythonModelOnByteIdsAndStokesMlpIsRefused) {
  std::ofstream(files_.File("bag.py")) << R"PY(
from torch import nn

class Bag(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(256, 16, padding_idx=0)
        self.out = nn.Linear(16, 3)

    def forward(self, ids):
        return self.out(self.embed(ids).mean(1))

def build_model():
    return Bag()
)PY";
  std::ofstream(files_.File("txt.yaml"))
      << "name: txt-shards\nmodel: {python: {file: bag.py}}\n"
      << "data:\n  shards: {urls: '" << Data() << "/shards/txt-{0..3}.tar', text_length: 64}\n"
      << "optimizer: {adamw: {}, lr: 0.01}\n"
      << "training: {steps: 150, batch_size: 32}\nmetrics: {interval_steps: 50}\n";
  const CommandResult run = Stoke({"submit", files_.File("txt.yaml"), "--watch"});
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err << coordinator().Log();
  EXPECT_GT(LastAccuracy(run.out), 90.0) << run.out;

  const std::string before = StoredJobs();
  std::ofstream(files_.File("txt-mlp.yaml"))
      << "model: {mlp: {}}\ndata:\n  shards: {urls: '" << Data()
      << "/shards/txt-{0..3}.tar'}\ntraining: {steps: 10}\n";
  const CommandResult mlp = Stoke({"submit", files_.File("txt-mlp.yaml")});
  EXPECT_EQ(mlp.exit_code, 2);
  EXPECT_NE(mlp.err.find("data.shards.urls: its samples are texts (.txt), fed as byte ids"),
            std::string::npos)
      << mlp.err;
  EXPECT_EQ(StoredJobs(), before) << "a refused job was stored";
}

TEST_F(ShardJobsTest, DataInspectSaysWhatEachSetsSamplesHold) {
  const std::string shards = Data() + "/shards";
  const CommandResult inspect =
      RunCommand({STOKE_CLI_BINARY, "data", "inspect", shards + "/train-{0000..0003}.tar",
                  shards + "/npy-{0..3}.tar", shards + "/txt-0.tar"});
  EXPECT_EQ(inspect.exit_code, 0) << inspect.out << inspect.err;
  for (const std::string& line :
       {std::string("data.shards: 4 tar shard(s), 2000 samples in 10 classes (labels 0 to 9); "
                    "inputs: images; sides of 64 from 40 to 40 pixels"),
        std::string("data.shards: 4 tar shard(s), 400 samples in 3 classes (labels 0 to 2); "
                    "inputs: .npy arrays; the first float32 [16]"),
        std::string("data.shards: 1 tar shard(s), 100 samples in 3 classes (labels 0 to 2); "
                    "inputs: .txt texts, fed as byte ids")}) {
    EXPECT_NE(inspect.out.find(line), std::string::npos) << line << "\n" << inspect.out;
  }
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
