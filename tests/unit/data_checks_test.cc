// Submission-time checks of the files a job spec names: what the coordinator refuses
// (each error starting with the spec field and naming the file), and the facts it learns
// from data it accepts. The files are written into a temp dir that serves as a data root.
#include "spec/data_checks.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdio.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <future>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "spec/job_spec_rules.h"
#include "tests/support/data_files.h"
#include "tests/support/temp_dir.h"

namespace stoke::server {
namespace {

namespace fs = std::filesystem;
using ::stoke::testing::TempDir;

// Refused as INVALID_ARGUMENT, the message starting with `field` and naming each of `names`.
::testing::AssertionResult Refused(const absl::Status& status, const std::string& field,
                                   const std::vector<std::string>& names) {
  if (status.ok()) return ::testing::AssertionFailure() << "accepted";
  if (status.code() != absl::StatusCode::kInvalidArgument) {
    return ::testing::AssertionFailure() << "not INVALID_ARGUMENT: " << status;
  }
  const std::string message(status.message());
  if (!absl::StartsWith(message, field + ": ")) {
    return ::testing::AssertionFailure() << "\"" << message << "\" does not start with " << field;
  }
  for (const std::string& name : names) {
    if (!absl::StrContains(message, name)) {
      return ::testing::AssertionFailure() << "\"" << message << "\" does not name " << name;
    }
  }
  return ::testing::AssertionSuccess() << message;
}

// A data root, a folder outside it, and specs for data in either.
class DataChecks : public ::testing::Test {
 protected:
  DataChecks() {
    // Canonical, so the paths in messages are the ones expected here.
    const std::string base = fs::canonical(dir_.path()).string();
    root_ = base + "/root";
    outside_ = base + "/outside";
    fs::create_directory(root_);
    fs::create_directory(outside_);
  }

  spec::DataRoots Roots() const { return spec::DataRoots({root_}); }

  // An MNIST folder of 30 training and 12 test images, 7x5, labels 0 to 9.
  std::string MnistFolder(const std::string& parent, const std::string& name,
                          bool gzip = false) const {
    const std::string folder = parent + "/" + name;
    fs::create_directory(folder);
    testing::WriteMnistFolder(folder, testing::PatternImages(30, 7, 5, 10),
                              testing::PatternImages(12, 7, 5, 10), gzip);
    return folder;
  }

  static v1::JobSpec MnistSpec(const std::string& path, uint32_t batch_size = 8) {
    v1::JobSpec spec;
    spec.mutable_model()->mutable_cnn();
    spec.mutable_data()->mutable_mnist()->set_path(path);
    spec.mutable_training()->set_steps(10);
    spec.mutable_training()->set_batch_size(batch_size);
    return spec;
  }

  static v1::JobSpec TokenSpec(const std::string& train, const std::string& val,
                               uint32_t vocab_size, uint32_t context) {
    v1::JobSpec spec;
    spec.mutable_model()->mutable_gpt();
    auto* tokens = spec.mutable_data()->mutable_tokens();
    tokens->set_train_path(train);
    tokens->set_val_path(val);
    tokens->set_vocab_size(vocab_size);
    tokens->set_context(context);
    spec.mutable_training()->set_steps(10);
    spec.mutable_training()->set_batch_size(2);
    return spec;
  }

  // A token file in the root whose ids count 0, 1, ... modulo 256.
  std::string Tokens(const std::string& name, int64_t count) const {
    const std::string path = root_ + "/" + name;
    testing::WriteTokens(path, testing::CountingTokens(count, 0, 256));
    return path;
  }

  TempDir dir_;
  std::string root_;
  std::string outside_;
};

// --- Where the data may lie ------------------------------------------------------------

TEST_F(DataChecks, APathOutsideEveryDataRootIsRefused) {
  const std::string folder = MnistFolder(outside_, "mnist");
  EXPECT_TRUE(Refused(spec::InspectData(MnistSpec(folder), Roots()).status(), "data.mnist.path",
                      {folder, root_, "--data-root"}));
  // A sibling whose name merely starts with the root's is outside it too.
  fs::create_directory(root_ + "2");
  const std::string sibling = MnistFolder(root_ + "2", "mnist");
  EXPECT_TRUE(Refused(spec::InspectData(MnistSpec(sibling), Roots()).status(), "data.mnist.path",
                      {sibling}));
  // Without any root, nothing is readable.
  EXPECT_TRUE(Refused(
      spec::InspectData(MnistSpec(MnistFolder(root_, "mnist")), spec::DataRoots({})).status(),
      "data.mnist.path", {"none"}));
}

TEST_F(DataChecks, RootsThatDoNotExistAreDropped) {
  spec::DataRoots roots({root_, dir_.File("missing")});
  EXPECT_EQ(roots.roots(), std::vector<std::string>{root_});
}

TEST_F(DataChecks, RelativePathsAreRefused) {
  spec::DataRoots roots({"/tmp"});
  EXPECT_TRUE(Refused(roots.Resolve("data.mnist.path", "relative/path").status(), "data.mnist.path",
                      {"relative/path", "absolute"}));
  EXPECT_TRUE(Refused(spec::InspectData(TokenSpec("train.bin", "", 256, 16), Roots()).status(),
                      "data.tokens.train_path", {"train.bin", "absolute"}));
}

// "data:REL" names REL beneath the first data root that holds it, so one job file works on
// every cluster; what it finds is then checked as any path is.
TEST_F(DataChecks, DataRootPathsResolveAgainstTheFirstRootHoldingThem) {
  const std::string second = dir_.File("second-root");
  fs::create_directories(second + "/shards");
  testing::WriteTokens(second + "/text.bin", testing::CountingTokens(4096, 0, 256));
  const spec::DataRoots roots({root_, second});
  const std::string canonical_second = fs::canonical(second).string();

  v1::JobSpec spec = TokenSpec("data:text.bin", "", 256, 16);
  ASSERT_TRUE(spec::ResolveDataRootPaths(spec, roots).ok());
  EXPECT_EQ(spec.data().tokens().train_path(), canonical_second + "/text.bin");
  EXPECT_TRUE(spec::InspectData(spec, roots).ok());
  // Where the first root holds it too, the first wins.
  Tokens("text.bin", 4096);
  spec = TokenSpec("data:text.bin", "", 256, 16);
  ASSERT_TRUE(spec::ResolveDataRootPaths(spec, roots).ok());
  EXPECT_EQ(spec.data().tokens().train_path(), fs::canonical(root_).string() + "/text.bin");
  // A brace pattern is found by its folder; a safetensors tensor by its file.
  v1::JobSpec shards;
  shards.mutable_data()->mutable_shards()->set_urls("data:shards/train-{0000..0003}.tar");
  ASSERT_TRUE(spec::ResolveDataRootPaths(shards, roots).ok());
  EXPECT_EQ(shards.data().shards().urls(), canonical_second + "/shards/train-{0000..0003}.tar");

  v1::JobSpec missing = TokenSpec("data:absent.bin", "", 256, 16);
  EXPECT_TRUE(Refused(spec::ResolveDataRootPaths(missing, roots), "data.tokens.train_path",
                      {"data:absent.bin", "none of the coordinator's data roots", root_}));
  v1::JobSpec climbing = TokenSpec("data:../outside/x.bin", "", 256, 16);
  EXPECT_TRUE(
      Refused(spec::ResolveDataRootPaths(climbing, roots), "data.tokens.train_path", {".."}));
  v1::JobSpec absolute = TokenSpec("data:/etc/passwd", "", 256, 16);
  EXPECT_TRUE(Refused(spec::ResolveDataRootPaths(absolute, roots), "data.tokens.train_path",
                      {"relative to the data roots"}));
}

TEST_F(DataChecks, ADotDotPathOutOfTheRootIsRefused) {
  MnistFolder(outside_, "mnist");
  const std::string sneaky = root_ + "/../outside/mnist";
  EXPECT_TRUE(
      Refused(spec::InspectData(MnistSpec(sneaky), Roots()).status(), "data.mnist.path", {sneaky}));
}

TEST_F(DataChecks, ASymlinkInsideARootThatLeadsOutIsRefused) {
  const std::string target = MnistFolder(outside_, "mnist");
  const std::string link = root_ + "/mnist";
  fs::create_directory_symlink(target, link);
  EXPECT_TRUE(Refused(spec::InspectData(MnistSpec(link), Roots()).status(), "data.mnist.path",
                      {link, "outside the coordinator's data roots"}));

  // A link that stays inside the roots is fine.
  const std::string inner = MnistFolder(root_, "real");
  fs::create_directory_symlink(inner, root_ + "/alias");
  EXPECT_TRUE(spec::InspectData(MnistSpec(root_ + "/alias"), Roots()).ok());
}

TEST_F(DataChecks, AFileInsideTheFolderThatLinksOutOfTheRootsIsRefused) {
  // The folder is inside the root, but one of the files the reader opens is not.
  const std::string elsewhere = MnistFolder(outside_, "mnist");
  const std::string folder = root_ + "/mnist";
  fs::create_directory(folder);
  testing::WriteMnistFolder(folder, testing::PatternImages(30, 7, 5, 10),
                            testing::PatternImages(12, 7, 5, 10));
  const std::string link = folder + "/" + testing::kMnistTrainImages;
  fs::remove(link);
  fs::create_symlink(elsewhere + "/" + testing::kMnistTrainImages, link);
  EXPECT_TRUE(
      Refused(spec::InspectData(MnistSpec(folder), Roots()).status(), "data.mnist.path", {link}));

  // The same for a token file's link, which Resolve already follows.
  const std::string tokens = outside_ + "/tokens.bin";
  testing::WriteTokens(tokens, testing::CountingTokens(400, 0, 256));
  fs::create_symlink(tokens, root_ + "/tokens.bin");
  EXPECT_TRUE(
      Refused(spec::InspectData(TokenSpec(root_ + "/tokens.bin", "", 256, 16), Roots()).status(),
              "data.tokens.train_path", {root_ + "/tokens.bin"}));
}

// A folder inside a root swapped, again and again, with a link to a folder outside the
// roots, while submissions are checked: a path is resolved, then its file opened, and a
// swap between the two must not lead the coordinator to read the outside file. That file
// holds a token id above the vocabulary, so a check that read it would say so; each check
// must instead read the inside file, or refuse the path as outside the roots.
TEST_F(DataChecks, AFolderSwappedForALinkOutOfTheRootsAfterItsPathWasCheckedIsNotRead) {
  const std::string folder = root_ + "/d";
  const std::string swap = root_ + "/swap";
  fs::create_directory(folder);
  fs::create_directory(outside_ + "/d");
  testing::WriteTokens(folder + "/data.bin", testing::CountingTokens(4000, 0, 256));
  std::vector<uint16_t> secret = testing::CountingTokens(4000, 0, 256);
  secret[5] = 60000;
  testing::WriteTokens(outside_ + "/d/data.bin", secret);
  fs::create_directory_symlink(outside_ + "/d", swap);
  const std::string path = folder + "/data.bin";

  std::atomic<bool> stop{false};
  std::atomic<int> swaps{0};
  std::thread swapper([&] {
    // The folder and the link trade places atomically: the path always leads somewhere.
    while (!stop.load()) {
      ASSERT_EQ(renameat2(AT_FDCWD, folder.c_str(), AT_FDCWD, swap.c_str(), RENAME_EXCHANGE), 0)
          << std::strerror(errno);
      ++swaps;
    }
  });
  int inside = 0, refused_at_resolve = 0, refused_at_open = 0, read_outside = 0;
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(1500);
  while (std::chrono::steady_clock::now() < until) {
    const absl::Status s = spec::InspectData(TokenSpec(path, "", 256, 16), Roots()).status();
    const std::string message(s.message());
    if (s.ok()) {
      ++inside;
    } else if (absl::StrContains(message, "vocab_size")) {  // only the outside file has one
      ++read_outside;
    } else if (absl::StrContains(message, "outside the coordinator's data roots")) {
      ++refused_at_resolve;
    } else if (absl::StrContains(message, "beneath none of the data roots") ||
               absl::StrContains(message, "changed while being opened")) {
      ++refused_at_open;
    } else if (!absl::StrContains(message, "No such file")) {  // mid-swap, on some kernels
      ADD_FAILURE() << message;
    }
  }
  stop = true;
  swapper.join();
  std::cout << swaps << " swaps; checks: " << inside << " read inside, " << refused_at_resolve
            << " refused when resolved, " << refused_at_open << " refused when opened, "
            << read_outside << " read the outside file\n";
  EXPECT_EQ(read_outside, 0) << "the coordinator read a file outside its data roots";
  EXPECT_GT(inside, 0);
}

TEST_F(DataChecks, AMissingPathIsRefused) {
  const std::string path = root_ + "/nothing-here";
  EXPECT_TRUE(Refused(spec::InspectData(MnistSpec(path), Roots()).status(), "data.mnist.path",
                      {path, "No such file"}));
  EXPECT_TRUE(
      Refused(spec::InspectData(MnistSpec(""), Roots()).status(), "data.mnist.path", {"required"}));
}

TEST_F(DataChecks, ATorchScriptModelOutsideTheRootsIsRefused) {
  const std::string model = outside_ + "/model.pt";
  testing::WriteBytes(model, "not really a model");
  v1::JobSpec spec = MnistSpec(MnistFolder(root_, "mnist"));
  spec.mutable_model()->mutable_torchscript()->set_path(model);
  EXPECT_TRUE(
      Refused(spec::InspectData(spec, Roots()).status(), "model.torchscript.path", {model}));
}

// --- What the files must hold ----------------------------------------------------------

TEST_F(DataChecks, AnMnistFolderMissingAFileIsRefused) {
  const std::string folder = MnistFolder(root_, "mnist");
  fs::remove(folder + "/" + testing::kMnistTestImages);
  EXPECT_TRUE(Refused(spec::InspectData(MnistSpec(folder), Roots()).status(), "data.mnist.path",
                      {folder, testing::kMnistTestImages}));
}

TEST_F(DataChecks, ATruncatedIdxFileIsRefused) {
  for (bool gzip : {false, true}) {
    SCOPED_TRACE(gzip ? "gzip" : "plain");
    const std::string folder = MnistFolder(root_, gzip ? "gz" : "plain", gzip);
    const std::string file = folder + "/" + testing::kMnistTrainImages + (gzip ? ".gz" : "");
    fs::resize_file(file, fs::file_size(file) - 20);
    EXPECT_TRUE(
        Refused(spec::InspectData(MnistSpec(folder), Roots()).status(), "data.mnist.path", {file}));
  }
}

TEST_F(DataChecks, AFileWithTheWrongMagicNumberIsRefused) {
  const std::string folder = MnistFolder(root_, "mnist");
  const std::string file = folder + "/" + testing::kMnistTestLabels;
  // A file of images where the labels belong.
  testing::WriteBytes(file, testing::IdxBytes({12, 1, 1}, std::vector<uint8_t>(12)));
  EXPECT_TRUE(Refused(spec::InspectData(MnistSpec(folder), Roots()).status(), "data.mnist.path",
                      {file, "magic number"}));
}

TEST_F(DataChecks, ImagesAndLabelsOfDifferentCountsAreRefused) {
  const std::string folder = MnistFolder(root_, "mnist");
  testing::WriteBytes(folder + "/" + testing::kMnistTrainLabels,
                      testing::IdxBytes({29}, std::vector<uint8_t>(29)));
  EXPECT_TRUE(Refused(
      spec::InspectData(MnistSpec(folder), Roots()).status(), "data.mnist.path",
      {folder + "/" + testing::kMnistTrainImages, folder + "/" + testing::kMnistTrainLabels}));
}

TEST_F(DataChecks, ACifarBatchOfPartialRecordsIsRefused) {
  const std::string folder = root_ + "/cifar";
  fs::create_directory(folder);
  testing::WriteCifarFolder(folder, 2, 2);
  testing::WriteBytes(folder + "/data_batch_2.bin", testing::CifarRecords({1}) + "x");
  v1::JobSpec spec = MnistSpec("");
  spec.mutable_data()->mutable_cifar10()->set_path(folder);
  EXPECT_TRUE(Refused(spec::InspectData(spec, Roots()).status(), "data.cifar10.path",
                      {folder + "/data_batch_2.bin"}));
}

TEST_F(DataChecks, ATokenIdOutsideTheVocabularyIsRefused) {
  std::vector<uint16_t> ids = testing::CountingTokens(400, 0, 256);
  ids[77] = 300;
  const std::string bad = root_ + "/bad.bin";
  testing::WriteTokens(bad, ids);
  // Where the id is and what the vocabulary holds; never the id read (the file's content).
  const absl::Status train = spec::InspectData(TokenSpec(bad, "", 256, 16), Roots()).status();
  EXPECT_TRUE(Refused(train, "data.tokens.train_path",
                      {bad, "position 77 (byte offset 154)", "data.tokens.vocab_size 256"}));
  EXPECT_FALSE(absl::StrContains(train.message(), "300")) << train;
  const absl::Status val =
      spec::InspectData(TokenSpec(Tokens("ok.bin", 400), bad, 256, 16), Roots()).status();
  EXPECT_TRUE(Refused(val, "data.tokens.val_path", {bad, "position 77", "vocab_size 256"}));
  EXPECT_FALSE(absl::StrContains(val.message(), "300")) << val;
  // With a vocabulary that holds it, the same file passes.
  EXPECT_TRUE(spec::InspectData(TokenSpec(bad, "", 301, 16), Roots()).ok());
}

// The peak resident memory of this process so far, in bytes (each test runs in a process
// of its own under ctest).
long PeakRssBytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_maxrss * 1024L;
}

TEST_F(DataChecks, ASparseGigabyteCifarBatchIsCheckedInSmallMemory) {
  const std::string folder = root_ + "/cifar";
  fs::create_directory(folder);
  testing::WriteCifarFolder(folder, 2, 2);
  // 1.1 GB of records (label 0, black pixels) that take no disk space; the reader once
  // held a whole batch (twice, as it grew), and a 4 GiB one ended in std::bad_alloc.
  constexpr int64_t kRecords = 350'000;
  fs::resize_file(folder + "/data_batch_1.bin", kRecords * testing::kCifarRecordBytes);
  v1::JobSpec spec = MnistSpec("");
  spec.mutable_data()->mutable_cifar10()->set_path(folder);
  const long before = PeakRssBytes();
  auto facts = spec::InspectData(spec, Roots());
  ASSERT_TRUE(facts.ok()) << facts.status();
  EXPECT_EQ(facts->train_samples, kRecords + 4 * 2);
  EXPECT_LT(PeakRssBytes() - before, 64L << 20) << "the batch was read into memory";
}

// Gzipped idx images of `count` black 1024x1024 images (a mebibyte each) and their
// labels: a gigabyte of images is a file of about a megabyte.
void WriteGzipBombImages(const std::string& folder, const char* images, const char* labels,
                         uint32_t count) {
  gzFile out = gzopen((folder + "/" + images + ".gz").c_str(), "wb1");
  ASSERT_NE(out, nullptr);
  const std::string header = testing::IdxBytes({count, 1024, 1024}, {});
  gzwrite(out, header.data(), static_cast<unsigned>(header.size()));
  const std::string zeros(1 << 20, '\0');
  for (uint32_t i = 0; i < count; ++i) {
    gzwrite(out, zeros.data(), static_cast<unsigned>(zeros.size()));
  }
  ASSERT_EQ(gzclose(out), Z_OK);
  testing::WriteBytes(folder + "/" + labels + ".gz",
                      testing::IdxBytes({count}, std::vector<uint8_t>(count, 3)), /*gzip=*/true);
}

void WriteGzipBombMnistFolder(const std::string& folder) {
  fs::create_directory(folder);
  WriteGzipBombImages(folder, testing::kMnistTrainImages, testing::kMnistTrainLabels, 1024);
  WriteGzipBombImages(folder, testing::kMnistTestImages, testing::kMnistTestLabels, 4);
}

TEST_F(DataChecks, AGzipBombIsCheckedInSmallMemory) {
  const std::string folder = root_ + "/bomb";
  WriteGzipBombMnistFolder(folder);
  ASSERT_LT(fs::file_size(folder + "/" + testing::kMnistTrainImages + ".gz"), 16u << 20);
  const long before = PeakRssBytes();
  auto facts = spec::InspectData(MnistSpec(folder), Roots());
  ASSERT_TRUE(facts.ok()) << facts.status();
  EXPECT_EQ(facts->train_samples, 1024);
  EXPECT_EQ(facts->sample, (std::vector<int64_t>{1, 1024, 1024}));
  EXPECT_LT(PeakRssBytes() - before, 64L << 20) << "the images were decompressed into memory";
}

// A FIFO where a data file should be: opening it for reading would wait for a writer
// (and hold an RPC thread meanwhile). Runs the check on a thread of its own so that a
// regression fails the test instead of hanging it.
::testing::AssertionResult RefusedWithoutWaiting(const std::function<absl::Status()>& check,
                                                 const std::string& field,
                                                 const std::string& fifo) {
  auto result = std::async(std::launch::async, check);
  if (result.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
    // Unblock the reader so the test can end.
    const int fd = open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
    if (fd >= 0) close(fd);
    result.wait();
    return ::testing::AssertionFailure() << "the check waited on the FIFO " << fifo;
  }
  return Refused(result.get(), field, {fifo, "not a regular file"});
}

TEST_F(DataChecks, AFifoNamedAsADataFileIsRefusedWithoutWaiting) {
  const std::string fifo = root_ + "/train.bin";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_TRUE(RefusedWithoutWaiting(
      [&] { return spec::InspectData(TokenSpec(fifo, "", 256, 16), Roots()).status(); },
      "data.tokens.train_path", fifo));

  const std::string folder = root_ + "/cifar";
  fs::create_directory(folder);
  testing::WriteCifarFolder(folder, 2, 2);
  fs::remove(folder + "/test_batch.bin");
  ASSERT_EQ(mkfifo((folder + "/test_batch.bin").c_str(), 0600), 0);
  v1::JobSpec spec = MnistSpec("");
  spec.mutable_data()->mutable_cifar10()->set_path(folder);
  EXPECT_TRUE(RefusedWithoutWaiting([&] { return spec::InspectData(spec, Roots()).status(); },
                                    "data.cifar10.path", folder + "/test_batch.bin"));
}

TEST_F(DataChecks, ATokenFileOfOddSizeIsRefused) {
  const std::string path = root_ + "/odd.bin";
  testing::WriteBytes(path, std::string(401, 'a'));
  EXPECT_TRUE(Refused(spec::InspectData(TokenSpec(path, "", 256, 16), Roots()).status(),
                      "data.tokens.train_path", {path}));
}

TEST_F(DataChecks, ATokenFileTooShortForOneWindowIsRefused) {
  // The worker needs context tokens of room for the window's shift, then the window and
  // its one extra target token: 2 * context tokens for one window.
  const std::string path = Tokens("short.bin", 31);
  EXPECT_TRUE(
      Refused(spec::InspectData(TokenSpec(path, Tokens("val.bin", 64), 256, 16), Roots()).status(),
              "data.tokens.train_path", {path, "data.tokens.context"}));
  EXPECT_TRUE(spec::InspectData(TokenSpec(Tokens("enough.bin", 32), Tokens("val.bin", 64), 256, 16),
                                Roots())
                  .ok());
}

TEST_F(DataChecks, AValidationFileTooShortForTheWorkersWindowIsRefused) {
  // The same rule as for training data: 31 tokens load no window of 16 on the worker.
  const std::string train = Tokens("train.bin", 400);
  const std::string val = Tokens("val.bin", 31);
  EXPECT_TRUE(Refused(spec::InspectData(TokenSpec(train, val, 256, 16), Roots()).status(),
                      "data.tokens.val_path", {val}));
  EXPECT_TRUE(spec::InspectData(TokenSpec(train, Tokens("val32.bin", 32), 256, 16), Roots()).ok());
}

TEST_F(DataChecks, AHeldOutTenthTooShortForOneWindowIsRefused) {
  // 300 tokens: 270 train (16 windows of 16), but the 30 held out hold none.
  const std::string path = Tokens("train.bin", 300);
  EXPECT_TRUE(Refused(spec::InspectData(TokenSpec(path, "", 256, 16), Roots()).status(),
                      "data.tokens.train_path", {path, "data.tokens.val_path"}));
  // 320 tokens hold out 32: one window.
  EXPECT_TRUE(spec::InspectData(TokenSpec(Tokens("train320.bin", 320), "", 256, 16), Roots()).ok());
}

TEST_F(DataChecks, ABatchLargerThanTheTrainingSetIsRefused) {
  const std::string folder = MnistFolder(root_, "mnist");  // 30 training images
  auto facts = spec::InspectData(MnistSpec(folder, 31), Roots());
  ASSERT_TRUE(facts.ok()) << facts.status();
  EXPECT_TRUE(Refused(spec::ValidateAgainstData(MnistSpec(folder, 31), *facts),
                      "training.batch_size", {"31", "30", "data.mnist.path", folder}));
  EXPECT_TRUE(spec::ValidateAgainstData(MnistSpec(folder, 30), *facts).ok());
  // Two ranks split the data: 15 each.
  v1::JobSpec two_ranks = MnistSpec(folder, 16);
  two_ranks.mutable_resources()->set_gpus(2);
  EXPECT_TRUE(Refused(spec::ValidateAgainstData(two_ranks, *facts), "training.batch_size",
                      {"15", "each rank", folder}));

  // Token windows count as samples: 400 tokens, context 16, no val_path: 360 train
  // tokens, 21 windows.
  const std::string tokens = Tokens("train.bin", 400);
  v1::JobSpec token_spec = TokenSpec(tokens, "", 256, 16);
  token_spec.mutable_training()->set_batch_size(22);
  auto token_facts = spec::InspectData(token_spec, Roots());
  ASSERT_TRUE(token_facts.ok()) << token_facts.status();
  EXPECT_TRUE(Refused(spec::ValidateAgainstData(token_spec, *token_facts), "training.batch_size",
                      {"21", tokens}));
}

// --- What the coordinator learns from good data ----------------------------------------

TEST_F(DataChecks, AnMnistFolderGivesItsShapeClassesAndSampleCount) {
  for (bool gzip : {false, true}) {
    SCOPED_TRACE(gzip ? "gzip" : "plain");
    const std::string folder = MnistFolder(root_, gzip ? "gz" : "plain", gzip);
    auto facts = spec::InspectData(MnistSpec(folder), Roots());
    ASSERT_TRUE(facts.ok()) << facts.status();
    EXPECT_EQ(facts->kind, spec::DataFacts::Kind::kImage);
    EXPECT_EQ(facts->sample, (std::vector<int64_t>{1, 7, 5}));
    EXPECT_EQ(facts->num_classes, 10);
    EXPECT_EQ(facts->train_samples, 30);
    EXPECT_TRUE(absl::StrContains(facts->source, "data.mnist.path")) << facts->source;
    EXPECT_TRUE(spec::ValidateAgainstData(MnistSpec(folder), *facts).ok());
  }
}

TEST_F(DataChecks, ACifarFolderGivesItsShapeClassesAndSampleCount) {
  const std::string folder = root_ + "/cifar";
  fs::create_directory(folder);
  testing::WriteCifarFolder(folder, 3, 2);
  v1::JobSpec spec = MnistSpec("");
  spec.mutable_data()->mutable_cifar10()->set_path(folder);
  auto facts = spec::InspectData(spec, Roots());
  ASSERT_TRUE(facts.ok()) << facts.status();
  EXPECT_EQ(facts->kind, spec::DataFacts::Kind::kImage);
  EXPECT_EQ(facts->sample, (std::vector<int64_t>{3, 32, 32}));
  EXPECT_EQ(facts->num_classes, 10);
  EXPECT_EQ(facts->train_samples, 15);
}

TEST_F(DataChecks, ATokenFileGivesItsVocabularyContextAndWindows) {
  const std::string train = Tokens("train.bin", 1000);
  // No val_path: the last tenth is held out, 900 tokens train: (900 - 16) / 16 windows.
  auto held_out = spec::InspectData(TokenSpec(train, "", 300, 16), Roots());
  ASSERT_TRUE(held_out.ok()) << held_out.status();
  EXPECT_EQ(held_out->kind, spec::DataFacts::Kind::kTokens);
  EXPECT_EQ(held_out->vocab_size, 300);
  EXPECT_EQ(held_out->sample, (std::vector<int64_t>{16}));
  EXPECT_EQ(held_out->train_samples, 55);
  // With val_path every training token trains: (1000 - 16) / 16.
  auto with_val = spec::InspectData(TokenSpec(train, Tokens("val.bin", 100), 300, 16), Roots());
  ASSERT_TRUE(with_val.ok()) << with_val.status();
  EXPECT_EQ(with_val->train_samples, 61);
  EXPECT_EQ(with_val->sample, (std::vector<int64_t>{16}));
}

TEST_F(DataChecks, TokenDataDefaultsToByteVocabularyAndContext256) {
  const std::string train = Tokens("train.bin", 10000);
  auto facts = spec::InspectData(TokenSpec(train, "", 0, 0), Roots());
  ASSERT_TRUE(facts.ok()) << facts.status();
  EXPECT_EQ(facts->vocab_size, 256);
  EXPECT_EQ(facts->sample, (std::vector<int64_t>{256}));
  EXPECT_EQ(facts->train_samples, (9000 - 256) / 256);
}

}  // namespace
}  // namespace stoke::server
