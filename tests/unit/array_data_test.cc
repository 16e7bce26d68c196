// data.arrays on CPU: .npy files NumPy itself wrote, safetensors files, the checks that
// refuse what Stoke cannot train on (naming the field and the file), the held-out split,
// batches read from the rows, and a 10 GiB array trained from without reading it whole.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <numeric>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "formats/array_file.h"
#include "formats/array_set.h"
#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"
#include "worker/data/sources.h"

namespace stoke::worker {
namespace {

using ::stoke::testing::CommandResult;
using ::stoke::testing::RunCommand;
using ::stoke::testing::TempDir;

// A .npy file (format 1.0) of `shape` whose data is `bytes`.
void WriteNpy(const std::string& path, const std::string& descr, const std::vector<int64_t>& shape,
              const std::string& bytes, bool fortran = false) {
  std::string dims;
  for (int64_t d : shape) dims += std::to_string(d) + ", ";
  std::string header = "{'descr': '" + descr +
                       "', 'fortran_order': " + (fortran ? "True" : "False") + ", 'shape': (" +
                       dims + "), }";
  header.append(64 - (10 + header.size() + 1) % 64, ' ');
  header += '\n';
  std::ofstream out(path, std::ios::binary);
  out.write("\x93NUMPY\x01\x00", 8);
  const uint16_t length = static_cast<uint16_t>(header.size());
  out.write(reinterpret_cast<const char*>(&length), 2);
  out << header << bytes;
}

struct StoredTensor {
  std::string name, dtype;
  std::vector<int64_t> shape;
  std::string bytes;
};

void WriteSafetensors(const std::string& path, const std::vector<StoredTensor>& tensors) {
  std::string header = "{\"__metadata__\": {\"format\": \"pt\"}";
  size_t offset = 0;
  for (const StoredTensor& t : tensors) {
    std::string dims;
    for (int64_t d : t.shape) dims += (dims.empty() ? "" : ",") + std::to_string(d);
    header += ", \"" + t.name + "\": {\"dtype\": \"" + t.dtype + "\", \"shape\": [" + dims +
              "], \"data_offsets\": [" + std::to_string(offset) + ", " +
              std::to_string(offset + t.bytes.size()) + "]}";
    offset += t.bytes.size();
  }
  header += "}";
  std::ofstream out(path, std::ios::binary);
  const uint64_t length = header.size();
  out.write(reinterpret_cast<const char*>(&length), 8);
  out << header;
  for (const StoredTensor& t : tensors) out << t.bytes;
}

template <typename T>
std::string Bytes(const std::vector<T>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T));
}

std::string Problem(const std::string& name) {
  auto opened = data::ArrayFile::Open(name);
  return opened.ok() ? "" : absl::StrCat(opened.status().message());
}

TEST(ArrayFile, ReadsWhatNumPyWritesInEveryTrainableDtype) {
  TempDir dir;
  const CommandResult numpy = RunCommand(
      {"/usr/bin/python3", "-c",
       "import numpy as np, sys\n"
       "d = sys.argv[1]\n"
       "np.save(d + '/u8.npy', np.arange(30, dtype=np.uint8).reshape(5, 2, 3))\n"
       "np.save(d + '/i32.npy', np.array([3, -1, 4, 1, 5], dtype=np.int32))\n"
       "np.save(d + '/i64.npy', np.array([9, 2, 6, 5, 3], dtype=np.int64))\n"
       "np.save(d + '/f16.npy', np.arange(20, dtype=np.float16).reshape(5, 4) / 4)\n"
       "np.save(d + '/f32.npy', np.arange(20, dtype=np.float32).reshape(5, 4) / 8)\n"
       "np.save(d + '/f64.npy', np.zeros((5, 4)))\n"
       "np.save(d + '/fortran.npy', np.asfortranarray(np.zeros((5, 4), dtype=np.float32)))\n",
       dir.path()});
  ASSERT_EQ(numpy.exit_code, 0) << numpy.err;

  auto u8 = data::ArrayFile::Open(dir.File("u8.npy"));
  ASSERT_TRUE(u8.ok()) << u8.status();
  EXPECT_EQ((*u8)->dtype(), data::ArrayDtype::kUInt8);
  EXPECT_EQ((*u8)->shape(), (std::vector<int64_t>{5, 2, 3}));
  EXPECT_EQ((*u8)->row_bytes(), 6);
  EXPECT_EQ((*u8)->row(4)[5], 29);
  int64_t min = 0, max = 0;
  auto i32 = data::ArrayFile::Open(dir.File("i32.npy"));
  ASSERT_TRUE(i32.ok()) << i32.status();
  ASSERT_TRUE((*i32)->IntegerRange(0, 5, &min, &max).ok());
  EXPECT_EQ(min, -1);
  EXPECT_EQ(max, 5);
  auto i64 = data::ArrayFile::Open(dir.File("i64.npy"));
  ASSERT_TRUE(i64.ok()) << i64.status();
  ASSERT_TRUE((*i64)->IntegerRange(1, 4, &min, &max).ok());
  EXPECT_EQ(min, 2);
  EXPECT_EQ(max, 6);
  for (const char* name : {"f16.npy", "f32.npy"}) {
    auto f = data::ArrayFile::Open(dir.File(name));
    ASSERT_TRUE(f.ok()) << f.status();
    EXPECT_EQ((*f)->shape(), (std::vector<int64_t>{5, 4}));
  }
  auto f32 = data::ArrayFile::Open(dir.File("f32.npy"));
  float value = 0;
  std::memcpy(&value, (*f32)->row(3) + 8, 4);  // the row's third float
  EXPECT_EQ(value, 14.0f / 8);

  EXPECT_NE(Problem(dir.File("f64.npy")).find("f64.npy: dtype <f8 is not one Stoke trains on"),
            std::string::npos)
      << Problem(dir.File("f64.npy"));
  EXPECT_NE(Problem(dir.File("f64.npy")).find("save float64 as float32"), std::string::npos);
  EXPECT_NE(Problem(dir.File("fortran.npy")).find("Fortran order"), std::string::npos);
}

TEST(ArrayFile, CutOffOrForeignFilesAreRefusedNamingThem) {
  TempDir dir;
  WriteNpy(dir.File("short.npy"), "<f4", {10, 4}, std::string(10 * 4 * 4 - 1, '\0'));
  EXPECT_NE(Problem(dir.File("short.npy")).find("short.npy: the header promises 160 bytes"),
            std::string::npos)
      << Problem(dir.File("short.npy"));
  std::ofstream(dir.File("text.npy")) << "not an array";
  EXPECT_NE(Problem(dir.File("text.npy")).find("text.npy: not a .npy file"), std::string::npos);
  std::ofstream(dir.File("data.csv")) << "1,2\n";
  EXPECT_NE(Problem(dir.File("data.csv")).find("not an array file Stoke reads"), std::string::npos);
  WriteNpy(dir.File("none.npy"), "<f4", {0, 4}, "");
  EXPECT_NE(Problem(dir.File("none.npy")).find("holds no samples"), std::string::npos);
  WriteNpy(dir.File("text-dtype.npy"), "<U8", {2}, std::string(64, 'a'));
  EXPECT_NE(Problem(dir.File("text-dtype.npy")).find("dtype <U8 is not one Stoke trains on"),
            std::string::npos);
  EXPECT_NE(Problem(dir.File("missing.npy")).find("missing.npy"), std::string::npos);
}

TEST(ArrayFile, SafetensorsFilesNameTheirTensor) {
  TempDir dir;
  const std::string path = dir.File("set.safetensors");
  std::vector<uint16_t> bf16(12);  // [6, 2]
  for (size_t i = 0; i < bf16.size(); ++i) bf16[i] = static_cast<uint16_t>(0x3F80 + i);
  WriteSafetensors(path, {{"x", "BF16", {6, 2}, Bytes(bf16)},
                          {"y", "I64", {6}, Bytes(std::vector<int64_t>{0, 1, 2, 0, 1, 2})}});
  auto x = data::ArrayFile::Open(path + ":x");
  ASSERT_TRUE(x.ok()) << x.status();
  EXPECT_EQ((*x)->dtype(), data::ArrayDtype::kBFloat16);
  EXPECT_EQ((*x)->shape(), (std::vector<int64_t>{6, 2}));
  uint16_t last = 0;
  std::memcpy(&last, (*x)->row(5) + 2, 2);
  EXPECT_EQ(last, 0x3F80 + 11);
  auto y = data::ArrayFile::Open(path + ":y");
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ((*y)->dtype(), data::ArrayDtype::kInt64);

  EXPECT_NE(Problem(path).find("holds 2 tensors; name one after a colon (FILE:NAME): x, y"),
            std::string::npos)
      << Problem(path);
  EXPECT_NE(Problem(path + ":z").find("no tensor named z; it holds: x, y"), std::string::npos);
  WriteSafetensors(dir.File("one.safetensors"), {{"only", "F32", {2, 2}, std::string(16, '\0')}});
  EXPECT_TRUE(data::ArrayFile::Open(dir.File("one.safetensors")).ok());
  WriteSafetensors(dir.File("lying.safetensors"), {{"t", "F32", {3, 2}, std::string(16, '\0')}});
  EXPECT_NE(Problem(dir.File("lying.safetensors")).find("take other than the 16 bytes"),
            std::string::npos)
      << Problem(dir.File("lying.safetensors"));
  WriteSafetensors(dir.File("f64.safetensors"), {{"t", "F64", {2}, std::string(16, '\0')}});
  EXPECT_NE(Problem(dir.File("f64.safetensors")).find("dtype F64 is not one Stoke trains on"),
            std::string::npos);
}

// Eight grey 2x3 images with labels 0..3, as arrays.
void WriteImages(const TempDir& dir) {
  std::vector<uint8_t> pixels(48);  // [8, 2, 3]
  std::iota(pixels.begin(), pixels.end(), 0);
  WriteNpy(dir.File("x.npy"), "|u1", {8, 2, 3}, Bytes(pixels));
  WriteNpy(dir.File("y.npy"), "<i8", {8}, Bytes(std::vector<int64_t>{0, 1, 2, 3, 0, 1, 2, 3}));
}

std::string SetProblem(const std::string& inputs, const std::string& targets,
                       const std::string& val_inputs = "", const std::string& val_targets = "",
                       double val_fraction = 0.1) {
  auto set = data::OpenArraySet({inputs, targets, val_inputs, val_targets, val_fraction});
  return set.ok() ? "" : absl::StrCat(set.status().message());
}

TEST(ArraySet, HoldsOutTheLastRowsCountsClassesAndTakesGreyImages) {
  TempDir dir;
  WriteImages(dir);
  auto set = data::OpenArraySet({dir.File("x.npy"), dir.File("y.npy"), "", "", 0.25});
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_TRUE(set->images);
  EXPECT_EQ(set->sample, (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(set->num_classes, 4);
  EXPECT_TRUE(set->regression.empty());
  EXPECT_EQ(set->train_rows, 6);
  EXPECT_EQ(set->val_begin, 6);
  EXPECT_EQ(set->val_end, 8);
}

TEST(ArraySet, MismatchesAndLabelsThatAreNoClassesAreRefusedNamingTheField) {
  TempDir dir;
  WriteImages(dir);
  WriteNpy(dir.File("y7.npy"), "<i8", {7}, Bytes(std::vector<int64_t>(7, 1)));
  EXPECT_NE(SetProblem(dir.File("x.npy"), dir.File("y7.npy"))
                .find("data.arrays.targets: " + dir.File("y7.npy") +
                      " has 7 rows and data.arrays.inputs " + dir.File("x.npy") + " has 8"),
            std::string::npos)
      << SetProblem(dir.File("x.npy"), dir.File("y7.npy"));
  WriteNpy(dir.File("neg.npy"), "<i4", {8}, Bytes(std::vector<int32_t>{0, 1, -2, 1, 0, 1, 0, 1}));
  EXPECT_NE(SetProblem(dir.File("x.npy"), dir.File("neg.npy")).find("holds label -2"),
            std::string::npos);
  WriteNpy(dir.File("zeros.npy"), "<i8", {8}, Bytes(std::vector<int64_t>(8, 0)));
  EXPECT_NE(SetProblem(dir.File("x.npy"), dir.File("zeros.npy")).find("one class only"),
            std::string::npos);
  WriteNpy(dir.File("vx.npy"), "|u1", {2, 3, 2}, std::string(12, '\0'));
  EXPECT_NE(SetProblem(dir.File("x.npy"), dir.File("y.npy"), dir.File("vx.npy"), dir.File("y.npy"))
                .find("data.arrays.val_inputs: " + dir.File("vx.npy") +
                      " is uint8 [2, 3, 2]; its rows must be like the training rows of "
                      "uint8 [8, 2, 3]"),
            std::string::npos);
  EXPECT_NE(SetProblem(dir.File("x.npy"), dir.File("y.npy"), dir.File("x.npy"), "")
                .find("data.arrays.val_targets: required with the other"),
            std::string::npos);
  EXPECT_NE(SetProblem(dir.File("x.npy"), "").find("data.arrays.targets: required"),
            std::string::npos);
  EXPECT_NE(SetProblem(dir.File("x.npy"), dir.File("y.npy"), "", "", 1.5)
                .find("data.arrays.val_fraction: must lie between 0 and 1"),
            std::string::npos);
}

TrainTask ArrayTask(const ArrayDataConfig& arrays, int64_t batch) {
  TrainTask task;
  task.data.source = arrays;
  task.data.loader.threads = 2;
  task.data.loader.prefetch = 2;
  task.data.loader.shuffle = false;
  task.training.batch_size = batch;
  task.training.seed = 3;
  return task;
}

TEST(OpenData, ImagesStoredChannelsLastComeOutChannelsFirstAndNormalized) {
  TempDir dir;
  // 10 RGB images of 2x2, stored [N, H, W, C]; pixel (h, w) of channel c is 100c + 10h + w.
  std::vector<uint8_t> pixels;
  for (int n = 0; n < 10; ++n) {
    for (int h = 0; h < 2; ++h) {
      for (int w = 0; w < 2; ++w) {
        for (int c = 0; c < 3; ++c) {
          pixels.push_back(static_cast<uint8_t>(100 * c + 10 * h + w + n));
        }
      }
    }
  }
  WriteNpy(dir.File("x.npy"), "|u1", {10, 2, 2, 3}, Bytes(pixels));
  WriteNpy(dir.File("y.npy"), "|u1", {10},
           Bytes(std::vector<uint8_t>{0, 1, 2, 0, 1, 2, 0, 1, 2, 0}));
  ArrayDataConfig arrays{dir.File("x.npy"), dir.File("y.npy"), "", "", 0.2};
  TrainTask task = ArrayTask(arrays, 4);
  task.data.augment.normalize = false;
  DataPipeline pipeline = OpenData(task, torch::kCPU, 0);
  const DataShape shape = pipeline.train->Shape();
  EXPECT_EQ(shape.kind, DataShape::Kind::kImage);
  EXPECT_EQ(shape.sample, (std::vector<int64_t>{3, 2, 2}));
  EXPECT_EQ(shape.num_classes, 3);
  const Batch batch = pipeline.train->Next();
  ASSERT_EQ(batch.inputs.sizes().vec(), (std::vector<int64_t>{4, 3, 2, 2}));
  EXPECT_EQ(batch.targets.scalar_type(), torch::kInt64);
  // Unshuffled: the first batch is images 0..3.
  for (int n = 0; n < 4; ++n) {
    EXPECT_EQ(batch.targets[n].item<int64_t>(), n % 3);
    EXPECT_FLOAT_EQ(batch.inputs[n][2][1][0].item<float>(), (200 + 10 + n) / 255.0f);
  }
  // The last two rows are held out.
  ASSERT_EQ(pipeline.eval->batches(), 1);
  const Batch held_out = pipeline.eval->Get(0);
  EXPECT_EQ(held_out.inputs.size(0), 2);
  EXPECT_FLOAT_EQ(held_out.inputs[1][0][0][0].item<float>(), 9 / 255.0f);
}

TEST(OpenData, FloatingTargetsAreRegressionTargetsFromSafetensors) {
  TempDir dir;
  std::vector<uint16_t> features(36, 0x3C00);  // [12, 3] float16 ones
  std::vector<float> targets(12);
  std::iota(targets.begin(), targets.end(), 0.5f);
  WriteSafetensors(dir.File("d.safetensors"), {{"features", "F16", {12, 3}, Bytes(features)},
                                               {"y", "F32", {12}, Bytes(targets)}});
  ArrayDataConfig arrays{dir.File("d.safetensors:features"), dir.File("d.safetensors:y"), "", "",
                         0.25};
  DataPipeline pipeline = OpenData(ArrayTask(arrays, 3), torch::kCPU, 0);
  const DataShape shape = pipeline.train->Shape();
  EXPECT_EQ(shape.kind, DataShape::Kind::kVector);
  EXPECT_EQ(shape.regression, (std::vector<int64_t>{1}));
  EXPECT_EQ(shape.num_classes, 0);
  const Batch batch = pipeline.train->Next();
  EXPECT_EQ(batch.inputs.scalar_type(), torch::kFloat32);
  EXPECT_TRUE(torch::equal(batch.inputs, torch::ones({3, 3})));
  ASSERT_EQ(batch.targets.sizes().vec(), (std::vector<int64_t>{3, 1}));
  EXPECT_EQ(batch.targets.scalar_type(), torch::kFloat32);
  EXPECT_FLOAT_EQ(batch.targets[2][0].item<float>(), 2.5f);
  EXPECT_EQ(pipeline.train->BatchesPerEpoch(), 3);  // 9 training rows
}

int64_t ResidentKiB() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6));
  }
  return -1;
}

// 10 GiB of float16 features: a sparse file (no disk used) mapped, never read whole.
// Training draws batches from anywhere in it while the process stays small.
TEST(OpenData, ATenGiBArrayTrainsWithResidentMemoryFarBelowItsSize) {
  TempDir dir;
  constexpr int64_t kRows = int64_t{5} << 20, kFeatures = 1024;  // 2 KiB a row
  // Headers alone, then each file extended to its data's size.
  auto header_bytes = [](const std::string& path) {
    return static_cast<int64_t>(std::ifstream(path, std::ios::ate | std::ios::binary).tellg());
  };
  WriteNpy(dir.File("x.npy"), "<f2", {kRows, kFeatures}, "");
  const int64_t x_data = header_bytes(dir.File("x.npy"));
  ASSERT_EQ(truncate(dir.File("x.npy").c_str(), x_data + kRows * kFeatures * 2), 0);
  WriteNpy(dir.File("y.npy"), "<i8", {kRows}, "");
  const int64_t y_data = header_bytes(dir.File("y.npy"));
  ASSERT_EQ(truncate(dir.File("y.npy").c_str(), y_data + kRows * 8), 0);
  {
    const int fd = open(dir.File("y.npy").c_str(), O_WRONLY);
    const int64_t label = 1;
    ASSERT_EQ(pwrite(fd, &label, 8, y_data + int64_t{12345} * 8), 8);  // two classes
    close(fd);
  }
  const int64_t before = ResidentKiB();
  ArrayDataConfig arrays{dir.File("x.npy"), dir.File("y.npy"), "", "", 0.01};
  TrainTask task = ArrayTask(arrays, 64);
  task.data.loader.shuffle = true;
  DataPipeline pipeline = OpenData(task, torch::kCPU, 0);
  EXPECT_EQ(pipeline.train->Shape().num_classes, 2);
  for (int i = 0; i < 50; ++i) {
    const Batch batch = pipeline.train->Next();
    ASSERT_EQ(batch.inputs.sizes().vec(), (std::vector<int64_t>{64, kFeatures}));
  }
  const int64_t grown = ResidentKiB() - before;
  // The labels (40 MiB, read once for the class count) and the batches' rows, not 10 GiB.
  EXPECT_LT(grown, 256 * 1024) << "resident memory grew by " << grown << " KiB";
}

}  // namespace
}  // namespace stoke::worker
