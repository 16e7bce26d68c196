// Every data source hands a Python model contiguous input and target tensors, in training
// and in evaluation, as a PyTorch DataLoader does. User code relies on it: nanoGPT's
// model.py flattens its targets with `targets.view(-1)`, which failed ("Cannot view a
// tensor with shape [12, 1024] and strides (1025, 1)") while synthetic token batches were
// two narrow()ed views of one buffer. Here a model that calls view(-1) on both tensors,
// and asserts they are contiguous (naming shape and strides), trains a few steps and is
// evaluated on each source: synthetic tokens, vectors and images, a token file, MNIST idx
// and CIFAR-10 folders, .npy arrays (features, NHWC images, regression targets,
// per-position labels), tar shards of arrays, texts and images, and an image folder.
// Real stoke-trainer processes on the CPU, Debian's torch; the data is a few dozen
// samples written by the test.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <memory>
#include <ostream>
#include <string>

#include "absl/strings/str_replace.h"
#include "files/posix_files.h"
#include "tests/support/data_files.h"
#include "tests/support/recording_observer.h"
#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"
#include "tests/support/trainer_jobs.h"

namespace stoke::testing {
namespace {

using worker::TrainOutcome;

// A tiny model whose forward(inputs, targets) returns its loss (loss: model) and first
// flattens both tensors with view(-1), as nanoGPT does with its targets: a batch whose
// memory is not contiguous fails the attempt with the assertion's message. Kinds: tokens
// (a label per position), ids (byte ids of a text, a label per text), features (a
// classifier of `size` values per sample, however they are shaped) and regression.
constexpr const char* kProbe = R"PY(
import torch
import torch.nn.functional as F
from torch import nn


def flat(name, t):
    assert t.is_contiguous(), "%s not contiguous: shape %s, strides %s" % (
        name, list(t.shape), t.stride())
    return t.view(-1)


class Probe(nn.Module):
    def __init__(self, kind, size, classes=1):
        super().__init__()
        self.kind, self.size = kind, size
        embeds = kind in ("tokens", "ids")
        if embeds:
            self.embed = nn.Embedding(size, 16)
        self.out = nn.Linear(16 if embeds else size, classes)

    def forward(self, inputs, targets):
        x, y = flat("inputs", inputs), flat("targets", targets)
        n = inputs.shape[0]
        if self.kind == "tokens":
            return F.cross_entropy(self.out(self.embed(x)), y)
        if self.kind == "ids":
            return F.cross_entropy(self.out(self.embed(x).view(n, -1, 16).mean(1)), y)
        x = x.view(n, self.size).float()
        if self.kind == "regression":
            return F.mse_loss(self.out(x).view(-1), y.float())
        return F.cross_entropy(self.out(x), y)


def build_model(**args):
    return Probe(**args)
)PY";

// The files of the sources that have them, in DIR (argv[1]), 40 samples each unless said:
// arrays/*.npy; shards/{npy,txt,png}-{0,1}.tar of 20 samples each (a .cls label with an
// .npy float32 [6], a .txt text or a 12 x 12 grey .png); images/<class>/ of 12 RGB
// pictures per class, PNGs and JPEGs.
constexpr const char* kMakeData = R"PY(
import io, os, sys, tarfile
import numpy as np
from PIL import Image

d = sys.argv[1]
rng = np.random.default_rng(3)
for sub in ("arrays", "shards", "images"):
    os.makedirs(os.path.join(d, sub), exist_ok=True)

def save(name, array):
    np.save(os.path.join(d, "arrays", name), array)

save("features.npy", rng.normal(size=(40, 6)).astype(np.float32))
save("classes.npy", (np.arange(40) % 3).astype(np.int64))
save("pixels.npy", rng.integers(0, 256, size=(40, 8, 8, 3), dtype=np.uint8))
save("pixel-labels.npy", (np.arange(40) % 4).astype(np.uint8))
save("values.npy", rng.normal(size=40).astype(np.float32))
ids = rng.integers(0, 32, size=(40, 8)).astype(np.int32)
save("ids.npy", ids)
save("next-ids.npy", ((ids + 1) % 32).astype(np.int64))

def png(pixels, mode):
    out = io.BytesIO()
    Image.fromarray(pixels, mode).save(out, format="PNG")
    return out.getvalue()

def add(tar, name, data):
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))

words = ["apple", "pear", "rock", "sand", "rain", "snow"]
for s in range(2):
    with tarfile.open(f"{d}/shards/npy-{s}.tar", "w") as npy, \
         tarfile.open(f"{d}/shards/txt-{s}.tar", "w") as txt, \
         tarfile.open(f"{d}/shards/png-{s}.tar", "w") as pic:
        for j in range(20):
            key, label = f"{s * 20 + j:05d}", str(j % 3).encode()
            b = io.BytesIO()
            np.save(b, rng.normal(size=6).astype(np.float32))
            add(npy, key + ".npy", b.getvalue())
            add(npy, key + ".cls", label)
            add(txt, key + ".txt", " ".join(rng.choice(words, size=4)).encode())
            add(txt, key + ".cls", label)
            add(pic, key + ".png", png(rng.integers(0, 256, (12, 12), dtype=np.uint8), "L"))
            add(pic, key + ".cls", label)

for c in ("a", "b", "c"):
    folder = os.path.join(d, "images", c)
    os.makedirs(folder, exist_ok=True)
    for k in range(12):
        picture = Image.fromarray(rng.integers(0, 256, (12, 12, 3), dtype=np.uint8), "RGB")
        picture.save(os.path.join(folder, f"{k}.{'png' if k % 2 else 'jpg'}"))
)PY";

// A data source: the job's data section ($DATA stands for the suite's data folder) and the
// probe's build_model arguments for its batches.
struct Source {
  std::string name;
  std::string data;
  std::string args;
};

// For failure messages and the test names.
void PrintTo(const Source& source, std::ostream* out) { *out << source.name; }

class PythonBatchesTest : public ::testing::TestWithParam<Source> {
 protected:
  static void SetUpTestSuite() {
    data_ = new TempDir();
    const std::string root = data_->path();
    std::string error;
    for (const char* sub : {"/mnist", "/cifar"}) {
      ASSERT_TRUE(files::MakeDirectories(root + sub, &error)) << error;
    }
    WriteTokens(root + "/tokens.bin", CountingTokens(2000, 0, 64));
    WriteMnistFolder(root + "/mnist", PatternImages(40, 8, 8, 10),
                     PatternImages(12, 8, 8, 10, /*salt=*/3));
    WriteCifarFolder(root + "/cifar", /*per_batch=*/4, /*test_records=*/8);
    const CommandResult made = RunCommand({"/usr/bin/python3", "-c", kMakeData, root});
    ASSERT_EQ(made.exit_code, 0) << made.out << made.err;
  }

  static void TearDownTestSuite() {
    delete data_;
    data_ = nullptr;
  }

  // Four steps of four samples, then one held-out batch: both paths hand batches to the
  // model's forward.
  TrainOutcome Train(const Source& source) {
    std::ofstream(dir_.File("probe.py")) << kProbe;
    const std::string data = absl::StrReplaceAll(source.data, {{"$DATA", data_->path()}});
    const std::string yaml = "model:\n  python: {file: probe.py, args: " + source.args +
                             ", loss: model}\ndata:\n  " + data +
                             "\noptimizer: {lr: 0.01}\ntraining: {steps: 4, batch_size: 4}\n"
                             "eval: {batches: 1}\nmetrics: {interval_steps: 2}\n";
    return TrainInTrainer(AssignJob(yaml, dir_.path(), dir_.File("job")), "cpu:0", observer_)
        .outcome;
  }

  std::string Logs() const {
    std::string all;
    for (const auto& line : observer_.logs) all += line + "\n";
    return all;
  }

  static TempDir* data_;
  TempDir dir_;
  RecordingObserver observer_;
};

TempDir* PythonBatchesTest::data_ = nullptr;

TEST_P(PythonBatchesTest, ModelGetsContiguousInputsAndTargets) {
  const TrainOutcome outcome = Train(GetParam());
  ASSERT_EQ(outcome.kind, TrainOutcome::Kind::kSucceeded) << outcome.message << "\n" << Logs();
  ASSERT_EQ(observer_.samples.size(), 2u) << Logs();
  EXPECT_EQ(observer_.samples.back().step, 4u);
  EXPECT_TRUE(std::isfinite(observer_.samples.back().loss));
  // The evaluation called forward(inputs, targets) on held-out batches too.
  ASSERT_EQ(observer_.evals.size(), 1u) << Logs();
  EXPECT_GT(observer_.evals[0].eval->samples, 0u);
  EXPECT_TRUE(std::isfinite(observer_.evals[0].eval->loss));
}

// Image sources flip and crop on the way (CPU augmentation), which must not leave a view.
constexpr const char* kAugment = "\n  augment: {crop_padding: 2, horizontal_flip: true}";

INSTANTIATE_TEST_SUITE_P(
    EverySource, PythonBatchesTest,
    ::testing::Values(
        Source{"SyntheticTokens", "synthetic: {vocab_size: 32, context: 8}",
               "{kind: tokens, size: 32, classes: 32}"},
        Source{"SyntheticVectors", "synthetic: {features: 6, num_classes: 3}",
               "{kind: features, size: 6, classes: 3}"},
        Source{"SyntheticImages", "synthetic: {image_shape: [2, 8, 8], num_classes: 3}",
               "{kind: features, size: 128, classes: 3}"},
        Source{"TokenFile", "tokens: {train_path: $DATA/tokens.bin, vocab_size: 64, context: 8}",
               "{kind: tokens, size: 64, classes: 64}"},
        Source{"MnistIdxFolder", std::string("mnist: {path: $DATA/mnist}") + kAugment,
               "{kind: features, size: 64, classes: 10}"},
        Source{"Cifar10Folder", std::string("cifar10: {path: $DATA/cifar}") + kAugment,
               "{kind: features, size: 3072, classes: 10}"},
        Source{"ArraysOfFeatures",
               "arrays: {inputs: $DATA/arrays/features.npy, targets: $DATA/arrays/classes.npy}",
               "{kind: features, size: 6, classes: 3}"},
        // Stored [N, H, W, C]: each row is transposed to [C, H, W] as it is read.
        Source{"ArraysOfNhwcImages",
               std::string("arrays: {inputs: $DATA/arrays/pixels.npy, "
                           "targets: $DATA/arrays/pixel-labels.npy}") +
                   kAugment,
               "{kind: features, size: 192, classes: 4}"},
        Source{"ArraysWithRegressionTargets",
               "arrays: {inputs: $DATA/arrays/features.npy, targets: $DATA/arrays/values.npy}",
               "{kind: regression, size: 6}"},
        Source{"ArraysWithPerPositionLabels",
               "arrays: {inputs: $DATA/arrays/ids.npy, targets: $DATA/arrays/next-ids.npy}",
               "{kind: tokens, size: 32, classes: 32}"},
        Source{"ShardsOfArrays", "shards: {urls: '$DATA/shards/npy-{0..1}.tar'}",
               "{kind: features, size: 6, classes: 3}"},
        Source{"ShardsOfTexts", "shards: {urls: '$DATA/shards/txt-{0..1}.tar', text_length: 16}",
               "{kind: ids, size: 256, classes: 3}"},
        Source{"ShardsOfImages",
               std::string("shards: {urls: '$DATA/shards/png-{0..1}.tar', size: 8, channels: 1}") +
                   kAugment,
               "{kind: features, size: 64, classes: 3}"},
        Source{"ImageFolder",
               std::string("images: {path: $DATA/images, size: 8, channels: 3}") + kAugment,
               "{kind: features, size: 192, classes: 3}"}),
    [](const ::testing::TestParamInfo<Source>& info) { return info.param.name; });

}  // namespace
}  // namespace stoke::testing
