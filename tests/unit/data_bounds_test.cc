// The data readers bounded before they allocate: a count or size read from a submitted file
// (a manifest's integer label, an image's declared pixels, a .npy or safetensors shape, a
// tar member's size, a pax record's length) is checked against what the file holds, or a
// documented bound, before anything is sized from it. Each case here was found with a
// hostile submission that crashed the coordinator or stalled a worker. Memory is bounded
// structurally (the peak resident size grows by less than a file's claim would take), never
// by timing: each test runs in a process of its own (gtest_discover_tests), so the peak
// before it is small.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>
#include <zlib.h>

// clang-format off
#include <cstdio>  // jpeglib.h needs FILE and size_t first
#include <jpeglib.h>
// clang-format on

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "formats/array_file.h"
#include "formats/array_set.h"
#include "formats/image_decode.h"
#include "formats/image_files.h"
#include "formats/shard_files.h"
#include "formats/tar_index.h"
#include "spec/data_checks.h"
#include "tests/support/data_files.h"
#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"

namespace stoke {
namespace {

using ::stoke::testing::TempDir;
using ::stoke::testing::WriteBytes;

// What a reader may add to the process's peak resident size while refusing a file whose
// claim would take gigabytes.
constexpr int64_t kSmallMemory = int64_t{64} << 20;

int64_t PeakRssBytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return int64_t{usage.ru_maxrss} * 1024;
}

// Refused as INVALID_ARGUMENT, the message naming each of `names`.
::testing::AssertionResult RefusedNaming(const absl::Status& status,
                                         const std::vector<std::string>& names) {
  if (status.ok()) return ::testing::AssertionFailure() << "accepted";
  if (status.code() != absl::StatusCode::kInvalidArgument) {
    return ::testing::AssertionFailure() << "not INVALID_ARGUMENT: " << status;
  }
  for (const std::string& name : names) {
    if (!absl::StrContains(status.message(), name)) {
      return ::testing::AssertionFailure()
             << "\"" << status.message() << "\" does not name " << name;
    }
  }
  return ::testing::AssertionSuccess() << status.message();
}

// The same, the message starting with the spec field (what SubmitJob and ValidateJob answer).
::testing::AssertionResult RefusedInField(const absl::Status& status, const std::string& field,
                                          const std::vector<std::string>& names) {
  auto refused = RefusedNaming(status, names);
  if (!refused) return refused;
  if (!absl::StartsWith(status.message(), field + ": ")) {
    return ::testing::AssertionFailure()
           << "\"" << status.message() << "\" does not start with " << field;
  }
  return refused;
}

// A file of `size` bytes of which only `bytes` at the start are written: the rest is a hole,
// which reads as zeros and takes no disk.
void WriteSparse(const std::string& path, const std::string& bytes, int64_t size) {
  WriteBytes(path, bytes);
  ASSERT_EQ(truncate(path.c_str(), size), 0) << path;
}

void WriteAt(const std::string& path, int64_t offset, const std::string& bytes) {
  const int fd = open(path.c_str(), O_WRONLY);
  ASSERT_GE(fd, 0) << path;
  ASSERT_EQ(pwrite(fd, bytes.data(), bytes.size(), offset), static_cast<ssize_t>(bytes.size()));
  close(fd);
}

// --- Image files: PNG and JPEG written here ---------------------------------------------

std::string BigEndian32(uint32_t v) {
  return {static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8),
          static_cast<char>(v)};
}

std::string PngChunk(const std::string& type, const std::string& data) {
  const std::string body = type + data;
  const uLong crc = crc32(0, reinterpret_cast<const Bytef*>(body.data()), body.size());
  return BigEndian32(static_cast<uint32_t>(data.size())) + body +
         BigEndian32(static_cast<uint32_t>(crc));
}

// A greyscale PNG whose IHDR declares width x height and whose IDAT holds `rows` (each a
// filter byte and its pixels) compressed: the whole image, or a few bytes of a huge one.
std::string PngBytes(uint32_t width, uint32_t height, const std::string& rows) {
  std::string ihdr = BigEndian32(width) + BigEndian32(height);
  ihdr += std::string("\x08\x00\x00\x00\x00", 5);  // 8 bits, grey, deflate, filter, no interlace
  std::string idat(compressBound(rows.size()), '\0');
  uLongf idat_size = idat.size();
  EXPECT_EQ(compress(reinterpret_cast<Bytef*>(idat.data()), &idat_size,
                     reinterpret_cast<const Bytef*>(rows.data()), rows.size()),
            Z_OK);
  idat.resize(idat_size);
  return std::string("\x89PNG\r\n\x1a\n", 8) + PngChunk("IHDR", ihdr) + PngChunk("IDAT", idat) +
         PngChunk("IEND", "");
}

// A small real PNG: pixel (x, y) is 10 * y + x.
std::string SmallPng(int width, int height) {
  std::string rows;
  for (int y = 0; y < height; ++y) {
    rows += '\0';
    for (int x = 0; x < width; ++x) rows += static_cast<char>(10 * y + x);
  }
  return PngBytes(width, height, rows);
}

// A real greyscale JPEG of width x height, its SOF header then made to declare
// `declared_width` x `declared_height` (0: as written).
std::string JpegBytes(int width, int height, int declared_width = 0, int declared_height = 0) {
  jpeg_compress_struct c;
  jpeg_error_mgr errors;
  c.err = jpeg_std_error(&errors);
  jpeg_create_compress(&c);
  unsigned char* buffer = nullptr;
  unsigned long size = 0;  // NOLINT(google-runtime-int): libjpeg's type
  jpeg_mem_dest(&c, &buffer, &size);
  c.image_width = static_cast<JDIMENSION>(width);
  c.image_height = static_cast<JDIMENSION>(height);
  c.input_components = 1;
  c.in_color_space = JCS_GRAYSCALE;
  jpeg_set_defaults(&c);
  jpeg_start_compress(&c, TRUE);
  std::vector<uint8_t> row(static_cast<size_t>(width));
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) row[static_cast<size_t>(x)] = static_cast<uint8_t>(8 * x + y);
    JSAMPROW rows[1] = {row.data()};
    jpeg_write_scanlines(&c, rows, 1);
  }
  jpeg_finish_compress(&c);
  std::string bytes(reinterpret_cast<const char*>(buffer), size);
  free(buffer);
  jpeg_destroy_compress(&c);
  if (declared_width > 0) {
    // SOF0: FF C0, its length (2), precision (1), then height and width big-endian.
    const size_t sof = bytes.find("\xFF\xC0");
    EXPECT_NE(sof, std::string::npos);
    bytes[sof + 5] = static_cast<char>(declared_height >> 8);
    bytes[sof + 6] = static_cast<char>(declared_height);
    bytes[sof + 7] = static_cast<char>(declared_width >> 8);
    bytes[sof + 8] = static_cast<char>(declared_width);
  }
  return bytes;
}

const uint8_t* Data(const std::string& bytes) {
  return reinterpret_cast<const uint8_t*>(bytes.data());
}

// A 30000 x 30000 PNG of a few hundred bytes: 900 megapixels, 2.7 GB as RGB.
std::string HugePng() { return PngBytes(30000, 30000, std::string(17, '\0')); }

TEST(ImageSizeBounds, TheBoundIsOneHundredMegapixels) {
  EXPECT_EQ(data::kMaxImagePixels, 100'000'000);
  const std::string at_bound = PngBytes(10000, 10000, std::string(1, '\0'));
  auto size = data::ReadImageSize(Data(at_bound), at_bound.size());
  ASSERT_TRUE(size.ok()) << size.status();
  EXPECT_EQ(size->width, 10000);
  const std::string over = PngBytes(10000, 10001, std::string(1, '\0'));
  EXPECT_TRUE(
      RefusedNaming(data::ReadImageSize(Data(over), over.size()).status(), {"10000x10001"}));
}

TEST(ImageSizeBounds, APngDeclaring30000By30000IsRefusedFromItsHeaderBeforeDecoding) {
  const std::string png = HugePng();
  ASSERT_LT(png.size(), 200u);
  const int64_t before = PeakRssBytes();
  EXPECT_TRUE(RefusedNaming(data::ReadImageSize(Data(png), png.size()).status(),
                            {"PNG declares 30000x30000 pixels", "100 megapixels"}));
  // Not the DATA_LOSS of a decoder that ran out of data: refused before libpng read on.
  auto decoded = data::DecodeImageRegion(Data(png), png.size(), 3, {0, 0, 224, 224}, 224);
  EXPECT_TRUE(RefusedNaming(decoded.status(), {"30000x30000", "refused before decoding"}));
  EXPECT_LT(PeakRssBytes() - before, kSmallMemory) << "a buffer was sized from the header";
}

TEST(ImageSizeBounds, AJpegDeclaring30000By30000IsRefusedFromItsHeaderBeforeDecoding) {
  const std::string jpeg = JpegBytes(16, 16, 30000, 30000);
  auto header_only = data::ReadImageSize(Data(jpeg), jpeg.size());
  EXPECT_TRUE(RefusedNaming(header_only.status(), {"JPEG declares 30000x30000 pixels"}));
  const int64_t before = PeakRssBytes();
  for (int channels : {1, 3}) {
    auto decoded =
        data::DecodeImageRegion(Data(jpeg), jpeg.size(), channels, {0, 0, 30000, 30000}, 30000);
    EXPECT_TRUE(RefusedNaming(decoded.status(), {"30000x30000", "refused before decoding"}));
  }
  EXPECT_LT(PeakRssBytes() - before, kSmallMemory) << "pixels were decoded";
}

TEST(ImageSizeBounds, ImagesWithinTheBoundStillDecode) {
  const std::string png = SmallPng(5, 4);
  auto png_size = data::ReadImageSize(Data(png), png.size());
  ASSERT_TRUE(png_size.ok()) << png_size.status();
  EXPECT_EQ(png_size->width, 5);
  EXPECT_EQ(png_size->height, 4);
  auto pixels = data::DecodeImageRegion(Data(png), png.size(), 1, {1, 2, 3, 2}, 1);
  ASSERT_TRUE(pixels.ok()) << pixels.status();
  EXPECT_EQ(pixels->pixels, (std::vector<uint8_t>{21, 22, 23, 31, 32, 33}));

  const std::string jpeg = JpegBytes(24, 16);
  auto jpeg_size = data::ReadImageSize(Data(jpeg), jpeg.size());
  ASSERT_TRUE(jpeg_size.ok()) << jpeg_size.status();
  EXPECT_EQ(jpeg_size->width, 24);
  auto decoded = data::DecodeImageRegion(Data(jpeg), jpeg.size(), 3, {0, 0, 24, 16}, 16);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->width, 24);
  EXPECT_EQ(decoded->height, 16);
}

// The check before training reads the headers of a sample of the files: an oversized one
// is named with its declared size, as a damaged one is.
TEST(ImageSizeBounds, TheHeaderCheckNamesTheFileAndItsDeclaredSize) {
  TempDir dir;
  WriteBytes(dir.File("small.png"), SmallPng(8, 8));
  WriteBytes(dir.File("huge.png"), HugePng());
  WriteBytes(dir.File("huge.jpg"), JpegBytes(16, 16, 30000, 30000));
  auto fine = data::CheckImageHeaders({{dir.File("small.png"), 0}}, 8);
  ASSERT_TRUE(fine.ok()) << fine.status();
  for (const char* name : {"huge.png", "huge.jpg"}) {
    auto checked = data::CheckImageHeaders({{dir.File("small.png"), 0}, {dir.File(name), 1}}, 8);
    EXPECT_TRUE(RefusedNaming(checked.status(), {dir.File(name) + ": ", "declares 30000x30000"}));
  }
}

// --- The image manifest's labels ----------------------------------------------------------

// A manifest of `labels.size()` images (a0.jpg, a1.jpg, ...) after a "path,label" header line,
// so that labels[i] is on line i + 2.
std::string Manifest(const TempDir& dir, const std::vector<std::string>& labels,
                     const std::string& name = "labels.csv") {
  std::string text = "path,label\n";
  for (size_t i = 0; i < labels.size(); ++i) {
    absl::StrAppend(&text, "a", i, ".jpg,", labels[i], "\n");
  }
  WriteBytes(dir.File(name), text);
  return dir.File(name);
}

const std::vector<std::string> kLabelBomb = {"0", "1099511627776", "1", "0", "1", "0", "1", "0"};

TEST(ManifestBounds, AnIntegerLabelNearTwoToTheFortyIsRefusedNamingTheFileAndLine) {
  TempDir dir;
  const std::string manifest = Manifest(dir, kLabelBomb);  // the bomb on line 3
  const int64_t before = PeakRssBytes();
  auto listed = data::ReadImageManifest(manifest);
  EXPECT_TRUE(RefusedNaming(listed.status(),
                            {manifest + ":3: label 1099511627776 is over the 8 files listed",
                             "numeric labels count classes from 0, so they run from 0 to 7 here"}));
  // One class name per index up to the largest was 2^40 strings: none is made.
  EXPECT_LT(PeakRssBytes() - before, kSmallMemory) << "classes were made up to the label";
}

TEST(ManifestBounds, AJsonLinesLabelBombIsRefusedAlike) {
  TempDir dir;
  std::string text;
  for (int i = 0; i < 8; ++i) {
    absl::StrAppend(&text, "{\"path\": \"a", i,
                    ".png\", \"label\": ", i == 5 ? "4398046511104" : "1", "}\n");
  }
  WriteBytes(dir.File("labels.jsonl"), text);
  EXPECT_TRUE(RefusedNaming(data::ReadImageManifest(dir.File("labels.jsonl")).status(),
                            {dir.File("labels.jsonl") + ":6: label 4398046511104 is over the 8"}));
}

TEST(ManifestBounds, IntegerLabelsRunBelowTheNumberOfFilesListed) {
  TempDir dir;
  auto seven = data::ReadImageManifest(Manifest(dir, {"0", "7", "1", "2", "3", "4", "5", "6"}));
  ASSERT_TRUE(seven.ok()) << seven.status();
  EXPECT_EQ(seven->classes.size(), 8u);
  EXPECT_EQ(seven->files[1].label, 7);
  EXPECT_EQ(seven->classes[7], "7");
  const std::string eight = Manifest(dir, {"0", "1", "8", "2", "3", "4", "5", "6"});
  EXPECT_TRUE(RefusedNaming(data::ReadImageManifest(eight).status(),
                            {eight + ":4: label 8 is over the 8 files listed"}));
  // Names are numbered, whatever they look like: as many classes as lines at most.
  auto names = data::ReadImageManifest(Manifest(dir, {"cat", "1099511627776", "dog"}));
  ASSERT_TRUE(names.ok()) << names.status();
  EXPECT_EQ(names->classes.size(), 3u);
}

TEST(ManifestBounds, AHeldOutManifestMayNameEveryClassOfTheTrainingImages) {
  TempDir dir;
  const std::string train =
      Manifest(dir, {"0", "1", "2", "3", "4", "5", "6", "7", "8", "9"}, "train.csv");
  const std::string val = Manifest(dir, {"8", "9"}, "val.csv");
  auto split = data::ListImageSplit({"", train, "", val, 0.1});
  ASSERT_TRUE(split.ok()) << split.status();
  EXPECT_EQ(split->num_classes, 10);
  EXPECT_EQ(split->val.files[1].label, 9);
  const std::string beyond = Manifest(dir, {"8", "10"}, "beyond.csv");
  auto refused = data::ListImageSplit({"", train, "", beyond, 0.1});
  EXPECT_TRUE(RefusedNaming(refused.status(),
                            {"data.images.val_manifest: " + beyond +
                             ":3: label 10 is over the 2 files listed and the 10 classes of the "
                             "training images"}));
}

// A manifest is read a piece (a mebibyte) at a time: lines that straddle pieces, and a last
// line with no newline, read as any other.
TEST(ManifestBounds, AManifestOfManyPiecesListsEveryLine) {
  TempDir dir;
  std::string text;
  constexpr int kLines = 60000;  // about 2.3 MB
  for (int i = 0; i < kLines; ++i) {
    absl::StrAppend(&text, "images/some/folder/image", i, ".jpg,", i % 3 == 0 ? "cat" : "dog",
                    i + 1 < kLines ? "\r\n" : "");
  }
  WriteBytes(dir.File("big.csv"), text);
  auto listed = data::ReadImageManifest(dir.File("big.csv"));
  ASSERT_TRUE(listed.ok()) << listed.status();
  ASSERT_EQ(listed->files.size(), static_cast<size_t>(kLines));
  for (int i = 0; i < kLines; ++i) {
    ASSERT_EQ(listed->files[static_cast<size_t>(i)].path,
              dir.File(absl::StrCat("images/some/folder/image", i, ".jpg")));
    ASSERT_EQ(listed->files[static_cast<size_t>(i)].label, i % 3 == 0 ? 0 : 1) << i;
  }
  // An error's line number counts across pieces.
  text += "\nno comma here\n";
  WriteBytes(dir.File("broken.csv"), text);
  EXPECT_TRUE(RefusedNaming(data::ReadImageManifest(dir.File("broken.csv")).status(),
                            {absl::StrCat(dir.File("broken.csv"), ":", kLines + 1, ": not a")}));
}

// A sparse gigabyte of zeros named as a manifest: refused at its first line, the rest unread.
TEST(ManifestBounds, AFileOfZerosIsRefusedAtItsFirstLineUnread) {
  TempDir dir;
  WriteSparse(dir.File("zeros.csv"), "", int64_t{1} << 30);
  const int64_t before = PeakRssBytes();
  EXPECT_TRUE(RefusedNaming(data::ReadImageManifest(dir.File("zeros.csv")).status(),
                            {dir.File("zeros.csv") + ":1: a line longer than 65536 bytes"}));
  EXPECT_LT(PeakRssBytes() - before, kSmallMemory) << "the file was read whole";
}

// SubmitJob and ValidateJob run InspectData: the problem comes back as INVALID_ARGUMENT
// naming the field, the manifest and the line.
TEST(ManifestBounds, TheSubmissionCheckRefusesTheLabelBombNamingTheField) {
  TempDir dir;
  const std::string manifest = Manifest(dir, kLabelBomb);
  v1::JobSpec spec;
  spec.mutable_model()->mutable_cnn();
  spec.mutable_data()->mutable_images()->set_manifest(manifest);
  spec.mutable_training()->set_steps(10);
  spec.mutable_training()->set_batch_size(2);
  auto facts = spec::InspectData(spec, spec::DataRoots({dir.path()}));
  EXPECT_TRUE(RefusedInField(facts.status(), "data.images.manifest",
                             {manifest + ":3: label 1099511627776 is over the 8 files listed"}));
}

TEST(ManifestBounds, DataInspectPrintsTheLabelBombAsAProblem) {
  TempDir dir;
  const std::string manifest = Manifest(dir, kLabelBomb);
  const testing::CommandResult run =
      testing::RunCommand({STOKE_CLI_BINARY, "data", "inspect", manifest});
  EXPECT_EQ(run.exit_code, 2) << run.out << run.err;
  EXPECT_NE(run.out.find(manifest + ": problem: " + manifest +
                         ":3: label 1099511627776 is over the 8 files listed"),
            std::string::npos)
      << run.out << run.err;
}

// --- Arrays: .npy and safetensors ---------------------------------------------------------

// A version 1 .npy file: the header dict padded to 128 bytes in all, then `data`.
std::string NpyBytes(const std::string& descr, const std::string& shape, const std::string& data) {
  std::string dict = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
  const size_t total = (10 + dict.size() + 1 + 63) / 64 * 64;
  dict.resize(total - 10 - 1, ' ');
  dict += '\n';
  std::string bytes("\x93NUMPY\x01\x00", 8);
  bytes += static_cast<char>(dict.size() & 0xff);
  bytes += static_cast<char>(dict.size() >> 8);
  return bytes + dict + data;
}

std::string SafetensorsBytes(const std::string& header, const std::string& data) {
  std::string bytes(8, '\0');
  const uint64_t n = header.size();
  std::memcpy(bytes.data(), &n, 8);  // little-endian, as every host is
  return bytes + header + data;
}

TEST(ArrayBounds, ANpyOfZeroByteRowsCannotClaimAnyRowCount) {
  TempDir dir;
  // 2^62 rows of nothing in a file of 128 bytes: every reader would loop over them.
  WriteBytes(dir.File("rows.npy"), NpyBytes("<i8", "(4611686018427387904, 0)", ""));
  EXPECT_TRUE(
      RefusedNaming(data::ArrayFile::Open(dir.File("rows.npy")).status(),
                    {dir.File("rows.npy"), "its samples hold no values (dimension 1 is 0)"}));
  // As a submission's targets, refused before the labels are scanned.
  WriteBytes(dir.File("x.npy"), NpyBytes("<f4", "(4,)", std::string(16, '\0')));
  v1::JobSpec spec;
  spec.mutable_model()->mutable_mlp();
  spec.mutable_data()->mutable_arrays()->set_inputs(dir.File("rows.npy"));
  spec.mutable_data()->mutable_arrays()->set_targets(dir.File("x.npy"));
  spec.mutable_training()->set_steps(10);
  spec.mutable_training()->set_batch_size(2);
  EXPECT_TRUE(RefusedInField(spec::InspectData(spec, spec::DataRoots({dir.path()})).status(),
                             "data.arrays.inputs", {dir.File("rows.npy"), "dimension 1 is 0"}));
}

TEST(ArrayBounds, ASafetensorsTensorOfZeroByteRowsIsRefused) {
  TempDir dir;
  WriteBytes(dir.File("rows.safetensors"),
             SafetensorsBytes(R"({"y":{"dtype":"I64","shape":[2305843009213693952,0],)"
                              R"("data_offsets":[0,0]}})",
                              ""));
  EXPECT_TRUE(RefusedNaming(data::ArrayFile::Open(dir.File("rows.safetensors")).status(),
                            {"dimension 1 is 0"}));
}

TEST(ArrayBounds, AShapeOfMoreThanSixtyFourDimensionsIsRefused) {
  TempDir dir;
  std::string shape = "(";
  for (int i = 0; i < 65; ++i) shape += "1, ";
  shape += ")";
  WriteBytes(dir.File("deep.npy"), NpyBytes("|u1", shape, std::string(1, '\0')));
  EXPECT_TRUE(RefusedNaming(data::ArrayFile::Open(dir.File("deep.npy")).status(),
                            {"a shape of more than 64 dimensions"}));
  std::string dims = "[";
  for (int i = 0; i < 65; ++i) dims += i ? ",1" : "1";
  WriteBytes(
      dir.File("deep.safetensors"),
      SafetensorsBytes(R"({"x":{"dtype":"U8","shape":)" + dims + R"(],"data_offsets":[0,1]}})",
                       std::string(1, '\0')));
  EXPECT_TRUE(RefusedNaming(data::ArrayFile::Open(dir.File("deep.safetensors")).status(),
                            {"tensor x: a shape of more than 64 dimensions"}));
}

// A header within the format's 100 MB whose JSON document would take ten to twenty times
// its text: refused while walking it, before the document is built.
TEST(ArrayBounds, ASafetensorsHeaderOfMillionsOfValuesIsRefusedBeforeItIsParsed) {
  TempDir dir;
  std::string header = R"({"x":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"pad":[)";
  constexpr int kValues = 10'000'000;  // 20 MB of "0,": about 200 MB as a document
  header.reserve(header.size() + size_t{2} * kValues + 8);
  for (int i = 0; i < kValues; ++i) header += i ? ",0" : "0";
  header += "]}}";
  WriteBytes(dir.File("wide.safetensors"), SafetensorsBytes(header, std::string(1, '\0')));
  header.clear();
  header.shrink_to_fit();
  const int64_t before = PeakRssBytes();
  EXPECT_TRUE(RefusedNaming(data::ArrayFile::Open(dir.File("wide.safetensors")).status(),
                            {dir.File("wide.safetensors"), "of more than 262144 values"}));
  EXPECT_TRUE(RefusedNaming(data::ListArrays(dir.File("wide.safetensors")).status(),
                            {"of more than 262144 values"}));
  EXPECT_LT(PeakRssBytes() - before, kSmallMemory) << "the header was parsed into a document";
}

TEST(ArrayBounds, ADeeplyNestedSafetensorsHeaderIsRefused) {
  TempDir dir;
  const std::string header = R"({"x":{"dtype":"U8","shape":[[[[1]]]],"data_offsets":[0,1]}})";
  WriteBytes(dir.File("nested.safetensors"), SafetensorsBytes(header, std::string(1, '\0')));
  EXPECT_TRUE(RefusedNaming(data::ArrayFile::Open(dir.File("nested.safetensors")).status(),
                            {"a safetensors header nested deeper than 3"}));
  // An honest header, with metadata, still opens.
  WriteBytes(dir.File("fine.safetensors"),
             SafetensorsBytes(R"({"__metadata__":{"format":"pt"},)"
                              R"("x":{"dtype":"U8","shape":[2,3],"data_offsets":[0,6]}})",
                              std::string(6, '\1')));
  auto fine = data::ArrayFile::Open(dir.File("fine.safetensors"));
  ASSERT_TRUE(fine.ok()) << fine.status();
  EXPECT_EQ((*fine)->shape(), (std::vector<int64_t>{2, 3}));
}

// --- Tar shards ---------------------------------------------------------------------------

// A ustar header: `size` in octal, or in GNU's base-256 form when `base256`.
std::string TarHeader(const std::string& name, uint64_t size, char type = '0',
                      bool base256 = false) {
  std::string h(512, '\0');
  h.replace(0, name.size(), name);
  h.replace(100, 7, "0000644");
  h.replace(108, 7, "0000000");
  h.replace(116, 7, "0000000");
  if (base256) {
    h[124] = static_cast<char>(0x80);
    for (int i = 0; i < 8; ++i) h[135 - i] = static_cast<char>(size >> (8 * i));
  } else {
    char octal[13];
    std::snprintf(octal, sizeof(octal), "%011llo", static_cast<unsigned long long>(size));
    h.replace(124, 11, octal);
  }
  h.replace(136, 11, "00000000000");
  h[156] = type;
  h.replace(257, 6, std::string("ustar\0", 6));
  h.replace(263, 2, "00");
  h.replace(148, 8, "        ");
  unsigned sum = 0;
  for (unsigned char c : h) sum += c;
  char checksum[8];
  std::snprintf(checksum, sizeof(checksum), "%06o", sum);
  h.replace(148, 6, checksum);
  h[154] = '\0';
  h[155] = ' ';
  return h;
}

std::string TarMember(const std::string& name, const std::string& content, char type = '0') {
  std::string block = TarHeader(name, content.size(), type) + content;
  block.resize((block.size() + 511) / 512 * 512, '\0');
  return block;
}

const std::string kTarEnd(1024, '\0');

TEST(TarBounds, AMemberSizeNearTwoToTheSixtyThreeIsDamagedNotOverflowed) {
  TempDir dir;
  const uint64_t size = (uint64_t{1} << 63) - 257;  // offset 512 + size passes 2^63
  WriteBytes(dir.File("huge.tar"), TarHeader("s0.jpg", size, '0', /*base256=*/true) + kTarEnd);
  auto index = data::ReadTarIndex(dir.File("huge.tar"), {});
  ASSERT_FALSE(index.ok());
  EXPECT_EQ(index.status().code(), absl::StatusCode::kDataLoss) << index.status();
  EXPECT_NE(index.status().message().find(absl::StrCat("damaged tar at byte 0: a member of ", size,
                                                       " bytes runs past the file's end")),
            std::string::npos)
      << index.status();
}

// A pax record "-3 x" once sent the reader three bytes back, to the record before it, for
// ever: a record's length must be digits that reach past itself.
TEST(TarBounds, APaxRecordOfNegativeLengthEndsTheRecordsInsteadOfLooping) {
  TempDir dir;
  WriteBytes(dir.File("loop.tar"),
             TarMember("pax", "3 \n-3 x\n", 'x') + TarMember("s0.cls", "1") + kTarEnd);
  auto index = data::ReadTarIndex(dir.File("loop.tar"), {});
  ASSERT_TRUE(index.ok()) << index.status();
  ASSERT_EQ(index->size(), 1u);
  EXPECT_EQ((*index)[0].name, "s0.cls");
  // An honest pax path still names the member that follows.
  WriteBytes(dir.File("pax.tar"),
             TarMember("pax", "22 path=long/name.cls\n", 'x') + TarMember("s0.cls", "1") + kTarEnd);
  auto named = data::ReadTarIndex(dir.File("pax.tar"), {});
  ASSERT_TRUE(named.ok()) << named.status();
  ASSERT_EQ(named->size(), 1u);
  EXPECT_EQ((*named)[0].name, "long/name.cls");
}

// A shard whose .npy member is 2 GiB (a hole, as a sparse file holds it): its header is read
// from the member's first bytes, and its size checked, not read.
TEST(TarBounds, AShardArrayHeaderIsReadFromTheMembersHeadNotItsWhole) {
  TempDir dir;
  constexpr int64_t kMember = int64_t{1} << 31;
  const std::string npy_head = NpyBytes("|u1", absl::StrCat("(", kMember - 128, ",)"), "");
  ASSERT_EQ(npy_head.size(), 128u);
  const std::string head = TarMember("s0.cls", "1") + TarHeader("s0.npy", kMember) + npy_head;
  const std::string shard = dir.File("big.tar");
  WriteSparse(shard, head, 1536 + kMember + 1024);  // the member, then the end's zero blocks
  auto samples = data::ListShardSamples(shard);
  ASSERT_TRUE(samples.ok()) << samples.status();
  ASSERT_EQ(samples->size(), 1u);
  EXPECT_EQ((*samples)[0].length, kMember);
  const int64_t before = PeakRssBytes();
  auto header = data::ReadShardArrayHeader((*samples)[0]);
  ASSERT_TRUE(header.ok()) << header.status();
  EXPECT_EQ(header->shape, (std::vector<int64_t>{kMember - 128}));
  EXPECT_EQ(header->data_bytes, kMember - 128);
  EXPECT_LT(PeakRssBytes() - before, kSmallMemory) << "the member was read whole";
  // A header promising more than the member holds is still refused, from the member's size.
  WriteAt(shard, 1536, NpyBytes("|u1", absl::StrCat("(", kMember, ",)"), "").substr(0, 128));
  EXPECT_TRUE(RefusedNaming(data::ReadShardArrayHeader((*samples)[0]).status(),
                            {shard + ":s0.npy", "the header promises 2147483648 bytes of data"}));
}

TEST(TarBounds, AMemberLargerThanTheCallersLimitIsRefusedBeforeItIsRead) {
  TempDir dir;
  WriteBytes(dir.File("s.tar"),
             TarMember("s0.cls", "0") + TarMember("s0.png", std::string(4096, 'x')) + kTarEnd);
  auto samples = data::ListShardSamples(dir.File("s.tar"));
  ASSERT_TRUE(samples.ok()) << samples.status();
  std::string bytes;
  EXPECT_TRUE(RefusedNaming(data::ReadImageBytes((*samples)[0], {}, 1024, &bytes),
                            {dir.File("s.tar") + ":s0.png", "4096 bytes, more than the 1024"}));
  EXPECT_TRUE(bytes.empty());
  ASSERT_TRUE(data::ReadImageBytes((*samples)[0], {}, 4096, &bytes).ok());
  EXPECT_EQ(bytes.size(), 4096u);
}

// --- Token files in `stoke data inspect` --------------------------------------------------

// Ids that climb to 65535 at the end of a long file: the largest found in one pass (raising
// a bound until no id passed it rescanned the file 65535 times).
TEST(TokenInspect, TheLargestIdIsFoundInOnePass) {
  TempDir dir;
  std::vector<uint16_t> tokens(size_t{1} << 22, 0);
  for (uint32_t id = 1; id < 65536; ++id) tokens.push_back(static_cast<uint16_t>(id));
  testing::WriteTokens(dir.File("tokens.bin"), tokens);
  const testing::CommandResult run =
      testing::RunCommand({STOKE_CLI_BINARY, "data", "inspect", dir.File("tokens.bin")});
  EXPECT_EQ(run.exit_code, 0) << run.out << run.err;
  EXPECT_NE(run.out.find("the largest 65535 (data.tokens.vocab_size at least 65536)"),
            std::string::npos)
      << run.out;
}

}  // namespace
}  // namespace stoke
