// data.images on CPU: decoding against Pillow's (the same libjpeg-turbo, so within its
// tolerance), DCT-domain scaling and region decoding, damaged files, the crops and the
// resize, folder and manifest listings, and the data set that skips and counts bad files.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "formats/image_decode.h"
#include "formats/image_files.h"
#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"
#include "worker/common/status_error.h"
#include "worker/data/image_file_dataset.h"
#include "worker/data/image_transform.h"
#include "worker/data/sources.h"

namespace stoke::worker {
namespace {

using ::stoke::testing::CommandResult;
using ::stoke::testing::RunCommand;
using ::stoke::testing::TempDir;

const std::string kMakeImages = std::string(STOKE_SOURCE_DIR) + "/examples/images/make_images.py";

std::vector<uint8_t> ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

// Runs Python with Pillow and NumPy; the script sees the folder as `d`.
void Python(const std::string& dir, const std::string& script) {
  const CommandResult r = RunCommand(
      {"/usr/bin/python3", "-c",
       "import sys, numpy as np\nfrom PIL import Image\nd = sys.argv[1]\n" + script, dir});
  ASSERT_EQ(r.exit_code, 0) << r.err;
}

// Pillow's decoding of `path` to RGB, [H, W, 3].
data::DecodedImage Pillow(const std::string& path) {
  const CommandResult r = RunCommand({"/usr/bin/python3", kMakeImages, "decode", path});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  std::istringstream out(r.out);
  data::DecodedImage image;
  std::string hex;
  out >> image.width >> image.height >> hex;
  image.channels = 3;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    image.pixels.push_back(static_cast<uint8_t>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  }
  return image;
}

data::DecodedImage Decode(const std::string& path, int channels, data::ImageRegion region,
                          int min_side = 1 << 20) {
  const std::vector<uint8_t> bytes = ReadBytes(path);
  auto decoded = data::DecodeImageRegion(bytes.data(), bytes.size(), channels, region, min_side);
  EXPECT_TRUE(decoded.ok()) << decoded.status();
  return decoded.ok() ? *decoded : data::DecodedImage{};
}

int LargestDifference(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  EXPECT_EQ(a.size(), b.size());
  int largest = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    largest = std::max(largest, std::abs(static_cast<int>(a[i]) - static_cast<int>(b[i])));
  }
  return largest;
}

TEST(ImageDecode, JpegAndPngDecodeAsPillowDecodesThem) {
  TempDir dir;
  Python(dir.path(),
         "rng = np.random.default_rng(1)\n"
         "smooth = Image.fromarray(rng.integers(0, 256, (6, 8, 3), dtype=np.uint8))"
         ".resize((53, 37), Image.BICUBIC)\n"
         "smooth.save(d + '/rgb.jpg', quality=90)\n"
         "smooth.convert('L').save(d + '/grey.jpg', quality=90)\n"
         "smooth.save(d + '/subsampled.jpg', quality=75, subsampling=2)\n"
         "rgba = smooth.convert('RGBA'); rgba.putalpha(255); rgba.save(d + '/rgba.png')\n"
         "smooth.convert('L').save(d + '/grey.png')\n");
  for (const char* name : {"rgb.jpg", "grey.jpg", "subsampled.jpg", "rgba.png", "grey.png"}) {
    const std::string path = dir.File(name);
    const data::DecodedImage pillow = Pillow(path);
    const data::DecodedImage ours = Decode(path, 3, {0, 0, 53, 37});
    EXPECT_EQ(ours.width, 53) << name;
    EXPECT_EQ(ours.height, 37) << name;
    // The same libjpeg-turbo: equal, or off by one where an IDCT rounds differently.
    EXPECT_LE(LargestDifference(ours.pixels, pillow.pixels), 1) << name;
  }
  // Grey output of a colour image: one channel.
  EXPECT_EQ(Decode(dir.File("rgb.jpg"), 1, {0, 0, 53, 37}).pixels.size(), 53u * 37u);
}

TEST(ImageDecode, ARegionDecodesAsThatPartOfTheWholeAndLargeOnesScaleInTheDctDomain) {
  TempDir dir;
  Python(dir.path(),
         "rng = np.random.default_rng(2)\n"
         "Image.fromarray(rng.integers(0, 256, (12, 16, 3), dtype=np.uint8))"
         ".resize((800, 600), Image.BICUBIC).save(d + '/photo.jpg', quality=90)\n");
  const std::string photo = dir.File("photo.jpg");
  const data::DecodedImage whole = Decode(photo, 3, {0, 0, 800, 600});
  const data::ImageRegion region{211, 97, 130, 71};
  const data::DecodedImage part = Decode(photo, 3, region);
  ASSERT_EQ(part.width, 130);
  ASSERT_EQ(part.height, 71);
  std::vector<uint8_t> expected;
  for (int y = 0; y < region.height; ++y) {
    const uint8_t* row =
        whole.pixels.data() + (static_cast<size_t>(region.y + y) * 800 + region.x) * 3;
    expected.insert(expected.end(), row, row + static_cast<size_t>(region.width) * 3);
  }
  EXPECT_LE(LargestDifference(part.pixels, expected), 1);

  // Wanted at 64 pixels: decoded at 1/8 (100 x 75), the largest that keeps both sides >= 64.
  const data::DecodedImage small = Decode(photo, 3, {0, 0, 800, 600}, 64);
  EXPECT_EQ(small.width, 100);
  EXPECT_EQ(small.height, 75);
  // A region of a quarter of the picture: 1/8 would leave it 50 x 37, so 1/4.
  const data::DecodedImage quarter = Decode(photo, 3, {400, 300, 400, 300}, 64);
  EXPECT_EQ(quarter.width, 100);
  EXPECT_EQ(quarter.height, 75);
  // The scaled picture is the picture: its mean colour is the whole's.
  auto mean = [](const data::DecodedImage& image) {
    double sum = 0;
    for (uint8_t v : image.pixels) sum += v;
    return sum / static_cast<double>(image.pixels.size());
  };
  EXPECT_NEAR(mean(small), mean(whole), 1.0);
}

TEST(ImageDecode, DamagedAndForeignFilesAreRefusedWithTheReason) {
  TempDir dir;
  Python(dir.path(),
         "Image.new('RGB', (64, 64), (10, 200, 30)).save(d + '/ok.jpg', quality=90)\n"
         "Image.new('RGB', (64, 64), (10, 200, 30)).save(d + '/ok.png')\n");
  for (const char* name : {"ok.jpg", "ok.png"}) {
    std::vector<uint8_t> bytes = ReadBytes(dir.File(name));
    bytes.resize(bytes.size() / 2);
    auto cut = data::DecodeImageRegion(bytes.data(), bytes.size(), 3, {0, 0, 64, 64}, 64);
    ASSERT_FALSE(cut.ok()) << name;
    EXPECT_EQ(cut.status().code(), absl::StatusCode::kDataLoss) << name;
  }
  const std::string text = "just text, no picture";
  auto foreign = data::ReadImageSize(reinterpret_cast<const uint8_t*>(text.data()), text.size());
  EXPECT_EQ(foreign.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(foreign.status().message()).find("neither JPEG nor PNG"),
            std::string::npos);
  const std::vector<uint8_t> png = ReadBytes(dir.File("ok.png"));
  auto size = data::ReadImageSize(png.data(), png.size());
  ASSERT_TRUE(size.ok());
  EXPECT_EQ(size->width, 64);
}

TEST(ImageTransform, RandomResizedCropsFitDependOnTheirSeedAndCoverTheAreaRange) {
  double smallest = 1, largest = 0;
  for (uint64_t seed = 0; seed < 2000; ++seed) {
    const data::ImageRegion r = RandomResizedCrop(640, 480, 0.08, seed);
    ASSERT_GE(r.x, 0);
    ASSERT_GE(r.y, 0);
    ASSERT_LE(r.x + r.width, 640);
    ASSERT_LE(r.y + r.height, 480);
    const double area = static_cast<double>(r.width) * r.height / (640.0 * 480.0);
    smallest = std::min(smallest, area);
    largest = std::max(largest, area);
    const data::ImageRegion again = RandomResizedCrop(640, 480, 0.08, seed);
    ASSERT_EQ(again.x, r.x);
    ASSERT_EQ(again.width, r.width);
  }
  EXPECT_LT(smallest, 0.1);
  EXPECT_GT(largest, 0.9);
  const data::ImageRegion whole = RandomResizedCrop(640, 480, 1.0, 3);
  EXPECT_EQ(whole.width * whole.height, 640 * 480);
  const data::ImageRegion centre = CentreCrop(400, 200);
  EXPECT_EQ(centre.width, 175);
  EXPECT_EQ(centre.x, (400 - 175) / 2);
  EXPECT_EQ(centre.y, (200 - 175) / 2);
}

TEST(ImageTransform, ResizeKeepsFlatColoursAndAveragesNeighbours) {
  data::DecodedImage flat{10, 6, 3, std::vector<uint8_t>(180)};  // [6, 10, 3]
  for (size_t i = 0; i < flat.pixels.size(); ++i) {
    flat.pixels[i] = static_cast<uint8_t>(50 * (i % 3));
  }
  std::vector<uint8_t> out(48);  // [3, 4, 4]
  ResizeToChw(flat, 4, out.data());
  for (int c = 0; c < 3; ++c) {
    for (int p = 0; p < 16; ++p) EXPECT_EQ(out[c * 16 + p], 50 * c);
  }
  // Columns 0, 100, 200, 250 halved to two: each output between its two inputs.
  data::DecodedImage ramp{4, 1, 1, {0, 100, 200, 250}};
  std::vector<uint8_t> two(2);
  ResizeToChw(ramp, 2, two.data());
  EXPECT_EQ(two[0], 50);
  EXPECT_EQ(two[1], 225);
}

TEST(ImageFiles, FoldersAndManifestsListTheSameImagesWithLabels) {
  TempDir dir;
  const CommandResult made =
      RunCommand({"/usr/bin/python3", kMakeImages, "folder", dir.path(), "5", "--png-every", "2"});
  ASSERT_EQ(made.exit_code, 0) << made.err;
  auto folder = data::ListImageFolder(dir.File("train"));
  ASSERT_TRUE(folder.ok()) << folder.status();
  EXPECT_EQ(folder->files.size(), 50u);
  ASSERT_EQ(folder->classes.size(), 10u);
  EXPECT_EQ(folder->classes[0], "bag");  // sorted names
  EXPECT_EQ(folder->files.front().label, 0);
  EXPECT_EQ(folder->files.back().label, 9);
  auto csv = data::ReadImageManifest(dir.File("train.csv"));
  ASSERT_TRUE(csv.ok()) << csv.status();
  EXPECT_EQ(csv->files.size(), 50u);
  EXPECT_EQ(csv->classes, folder->classes);  // names numbered in sorted order, as folders are
  EXPECT_EQ(csv->files[0].path.rfind(dir.path() + "/train/", 0), 0u) << csv->files[0].path;
  auto jsonl = data::ReadImageManifest(dir.File("train.jsonl"));
  ASSERT_TRUE(jsonl.ok()) << jsonl.status();
  EXPECT_EQ(jsonl->classes.size(), 10u);  // integer labels 0..9

  std::ofstream(dir.File("broken.csv")) << "path,label\ntrain/a.jpg,1\nno comma here\n";
  auto broken = data::ReadImageManifest(dir.File("broken.csv"));
  EXPECT_NE(std::string(broken.status().message()).find(dir.File("broken.csv") + ":3: not a"),
            std::string::npos)
      << broken.status();
  std::ofstream(dir.File("one.csv")) << "a.jpg,cat\nb.jpg,cat\n";
  EXPECT_NE(std::string(data::ReadImageManifest(dir.File("one.csv")).status().message())
                .find("names one class only"),
            std::string::npos);
  auto flat = data::ListImageFolder(dir.File("train/bag"));
  EXPECT_FALSE(flat.ok());
  auto split = data::ListImageSplit({dir.File("train"), "", "", "", 0.2});
  ASSERT_TRUE(split.ok()) << split.status();
  EXPECT_EQ(split->train.files.size(), 40u);
  EXPECT_EQ(split->val.files.size(), 10u);  // every fifth, so every class is held out
}

TEST(ImageFileDataset, ADamagedFileIsSkippedCountedAndReplacedUntilTooManyAre) {
  TempDir dir;
  const CommandResult made =
      RunCommand({"/usr/bin/python3", kMakeImages, "folder", dir.path(), "10", "--damaged", "2"});
  ASSERT_EQ(made.exit_code, 0) << made.err;
  auto listed = data::ListImageFolder(dir.File("train"));
  ASSERT_TRUE(listed.ok());
  ImageFileDataset::Options options;
  options.size = 16;
  options.max_bad_fraction = 0.1;  // 10 of 100
  ImageFileDataset set(listed->files, 10, options);
  torch::Tensor inputs = set.NewInputs(1, false), targets = set.NewTargets(1, false);
  for (int64_t i = 0; i < set.size(); ++i) set.Fill(i, 0, 0, inputs, targets);
  EXPECT_EQ(set.SkippedSamples(), 2);
  EXPECT_EQ(inputs.sizes().vec(), (std::vector<int64_t>{1, 3, 16, 16}));

  options.max_bad_fraction = 0;  // one bad file is forgiven in any set; the second is not
  ImageFileDataset strict(listed->files, 10, options);
  try {
    for (int64_t i = 0; i < strict.size(); ++i) strict.Fill(i, 0, 0, inputs, targets);
    ADD_FAILURE() << "two damaged files of 100 passed a max_bad_fraction of 0";
  } catch (const StatusError& e) {
    EXPECT_EQ(e.code(), absl::StatusCode::kDataLoss);
    EXPECT_NE(std::string(e.what()).find("2 of the 100 images cannot be read"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("damaged JPEG"), std::string::npos) << e.what();
  }
}

TEST(OpenData, AnImageFolderGivesNormalizedBatchesAndCentreCroppedEvaluation) {
  TempDir dir;
  const CommandResult made =
      RunCommand({"/usr/bin/python3", kMakeImages, "folder", dir.path(), "8", "--size", "40"});
  ASSERT_EQ(made.exit_code, 0) << made.err;
  TrainTask task;
  ImageDataConfig images;
  images.path = dir.File("train");
  images.val_path = dir.File("val");
  images.size = 32;
  images.channels = 1;
  task.data.source = images;
  task.data.loader.threads = 2;
  task.training.batch_size = 8;
  DataPipeline pipeline = OpenData(task, torch::kCPU, 0);
  const DataShape shape = pipeline.train->Shape();
  EXPECT_EQ(shape.kind, DataShape::Kind::kImage);
  EXPECT_EQ(shape.sample, (std::vector<int64_t>{1, 32, 32}));
  EXPECT_EQ(shape.num_classes, 10);
  EXPECT_EQ(pipeline.train->BatchesPerEpoch(), 10);
  const Batch batch = pipeline.train->Next();
  EXPECT_EQ(batch.inputs.sizes().vec(), (std::vector<int64_t>{8, 1, 32, 32}));
  EXPECT_EQ(batch.inputs.scalar_type(), torch::kFloat32);
  // Normalized by the training images' statistics: roughly zero mean, unit spread.
  EXPECT_LT(std::abs(batch.inputs.mean().item<double>()), 0.5);
  // Evaluation is the same every time: centre crops, no draws.
  ASSERT_EQ(pipeline.eval->batches(), 2);  // 10 classes x 1 held-out image
  EXPECT_TRUE(torch::equal(pipeline.eval->Get(1).inputs, pipeline.eval->Get(1).inputs));
}

}  // namespace
}  // namespace stoke::worker
