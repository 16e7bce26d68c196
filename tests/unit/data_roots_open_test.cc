// The worker's second look at a job's files, as it opens them: a path that leads outside
// the data roots (a link swapped in after the coordinator's check) is refused whatever
// the coordinator said, links that stay inside are followed, a FIFO is refused without
// waiting, and no reader's error carries bytes read from the file.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <vector>

#include "files/posix_files.h"
#include "files/rooted_open.h"
#include "formats/idx_file.h"
#include "formats/image_set.h"
#include "formats/read_options.h"
#include "formats/token_file.h"
#include "tests/support/data_files.h"
#include "tests/support/temp_dir.h"

namespace stoke {
namespace {

using files::OpenRefusal;
using files::OpenRegularFileUnderRoots;
using testing::TempDir;

// What a descriptor reads, to its end.
std::string ReadAll(int fd) {
  std::string out;
  char buffer[4096];
  ssize_t n;
  while ((n = read(fd, buffer, sizeof(buffer))) > 0) out.append(buffer, static_cast<size_t>(n));
  close(fd);
  return out;
}

class DataRootsOpen : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(mkdir(root_.c_str(), 0755), 0);
    ASSERT_EQ(mkdir(outside_.c_str(), 0755), 0);
    testing::WriteBytes(root_ + "/inside.bin", "inside");
    testing::WriteBytes(outside_ + "/secret.txt", "SECRET-BYTES");
  }

  // The descriptor, or -1 with error_ and why_ set.
  int Open(const std::string& path) {
    return OpenRegularFileUnderRoots({root_}, path, &error_, &size_, &why_);
  }

  TempDir dir_;
  const std::string root_ = dir_.File("root");
  const std::string outside_ = dir_.File("outside");
  std::string error_;
  long long size_ = 0;
  OpenRefusal why_ = OpenRefusal::kNone;
};

TEST_F(DataRootsOpen, AFileBeneathARootOpensAndReads) {
  const int fd = Open(root_ + "/inside.bin");
  ASSERT_GE(fd, 0) << error_;
  EXPECT_EQ(size_, 6);
  EXPECT_EQ(ReadAll(fd), "inside");
}

// The coordinator's check passed at submit time (the path was a plain file then); a link
// to a file outside every root took its place before the worker opened it.
TEST_F(DataRootsOpen, ALinkSwappedInThatLeadsOutsideTheRootIsRefused) {
  const std::string path = root_ + "/tokens.bin";
  testing::WriteBytes(path, "good");
  ASSERT_EQ(unlink(path.c_str()), 0);
  ASSERT_EQ(symlink((outside_ + "/secret.txt").c_str(), path.c_str()), 0);
  EXPECT_LT(Open(path), 0);
  EXPECT_EQ(why_, OpenRefusal::kOutsideRoots);
  EXPECT_NE(error_.find("beneath none of the data roots"), std::string::npos) << error_;

  // The same through a linked folder, and through "..".
  ASSERT_EQ(symlink(outside_.c_str(), (root_ + "/folder").c_str()), 0);
  EXPECT_LT(Open(root_ + "/folder/secret.txt"), 0);
  EXPECT_EQ(why_, OpenRefusal::kOutsideRoots);
  EXPECT_LT(Open(root_ + "/../outside/secret.txt"), 0);
  EXPECT_EQ(why_, OpenRefusal::kOutsideRoots);

  // Through the readers: PERMISSION_DENIED (not retried), naming the file, without its bytes.
  data::ReadOptions options;
  options.roots = {root_};
  auto tokens = data::TokenFile::Open(path, options);
  ASSERT_FALSE(tokens.ok());
  EXPECT_EQ(tokens.status().code(), absl::StatusCode::kPermissionDenied) << tokens.status();
  EXPECT_NE(tokens.status().message().find(path), std::string::npos) << tokens.status();
  EXPECT_EQ(tokens.status().message().find("SECRET"), std::string::npos) << tokens.status();
  // Without roots (the coordinator's and the CLI's use) the readers open what they are
  // given, as before.
  EXPECT_TRUE(data::TokenFile::Open(path).ok());
}

TEST_F(DataRootsOpen, LinksThatStayBeneathARootAreFollowed) {
  ASSERT_EQ(mkdir((root_ + "/real").c_str(), 0755), 0);
  testing::WriteBytes(root_ + "/real/data.bin", "real data");
  ASSERT_EQ(symlink("real", (root_ + "/alias").c_str()), 0);                            // relative
  ASSERT_EQ(symlink((root_ + "/real/data.bin").c_str(), (root_ + "/abs").c_str()), 0);  // absolute
  int fd = Open(root_ + "/alias/data.bin");
  ASSERT_GE(fd, 0) << error_;
  EXPECT_EQ(ReadAll(fd), "real data");
  fd = Open(root_ + "/abs");
  ASSERT_GE(fd, 0) << error_;
  EXPECT_EQ(ReadAll(fd), "real data");
  // A root named through a link of its own (/data -> /mnt/data) works too.
  ASSERT_EQ(symlink(root_.c_str(), dir_.File("root-link").c_str()), 0);
  fd = OpenRegularFileUnderRoots({dir_.File("root-link")}, dir_.File("root-link/inside.bin"),
                                 &error_, &size_, &why_);
  ASSERT_GE(fd, 0) << error_;
  EXPECT_EQ(ReadAll(fd), "inside");
}

TEST_F(DataRootsOpen, AFifoIsRefusedAtOnceAndAMissingFileMayYetAppear) {
  const std::string fifo = root_ + "/fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0644), 0);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_LT(Open(fifo), 0);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
  EXPECT_EQ(why_, OpenRefusal::kNotRegular);
  EXPECT_NE(error_.find("a FIFO"), std::string::npos) << error_;

  EXPECT_LT(Open(root_ + "/not-yet/there.bin"), 0);
  EXPECT_EQ(why_, OpenRefusal::kUnavailable);
  data::ReadOptions options;
  options.roots = {root_};
  EXPECT_EQ(data::TokenFile::Open(root_ + "/not-yet.bin", options).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(data::TokenFile::Open(fifo, options).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(DataRootsOpen, ALinkLoopIsRefused) {
  ASSERT_EQ(symlink("b", (root_ + "/a").c_str()), 0);
  ASSERT_EQ(symlink("a", (root_ + "/b").c_str()), 0);
  EXPECT_LT(Open(root_ + "/a"), 0);
  EXPECT_EQ(why_, OpenRefusal::kOutsideRoots);
  EXPECT_NE(error_.find("too many levels of symbolic links"), std::string::npos) << error_;
}

// A malformed file's error says what is wrong by sizes, offsets and field names; the bytes
// themselves (which could be anything the worker can read) never appear.
TEST_F(DataRootsOpen, AMalformedFilesErrorDoesNotQuoteItsBytes) {
  // An idx file whose first four bytes are text.
  const std::string idx = root_ + "/train-images-idx3-ubyte";
  testing::WriteBytes(idx, "root:x:0:0:root:/root:/bin/bash\n");
  data::ReadOptions options;
  options.roots = {root_};
  auto images = data::ReadIdxFile(idx, 3, options);
  ASSERT_FALSE(images.ok());
  std::string message(images.status().message());
  EXPECT_NE(message.find("wrong magic number"), std::string::npos) << message;
  EXPECT_EQ(message.find("0x726f6f74"), std::string::npos) << message;  // "root" in hex
  for (size_t at; (at = message.find(idx)) != std::string::npos;) message.erase(at, idx.size());
  EXPECT_EQ(message.find("root"), std::string::npos) << message;  // but in the path

  // A CIFAR-10 batch with a label byte that is no label (0xAB).
  const std::string cifar = dir_.File("root/cifar");
  ASSERT_EQ(mkdir(cifar.c_str(), 0755), 0);
  testing::WriteCifarFolder(cifar, 2, 2);
  std::string batch = testing::CifarRecords({3, 0xAB});
  testing::WriteBytes(cifar + "/data_batch_2.bin", batch);
  auto splits = data::ReadCifar10Folder(cifar, options);
  ASSERT_FALSE(splits.ok());
  const std::string cifar_message(splits.status().message());
  EXPECT_NE(cifar_message.find("record 1 has a label above 9"), std::string::npos) << cifar_message;
  EXPECT_EQ(cifar_message.find("171"), std::string::npos) << cifar_message;  // 0xAB
}

TEST_F(DataRootsOpen, AReadStopsWhenItsJobIsCancelled) {
  const std::string cifar = dir_.File("root/cifar");
  ASSERT_EQ(mkdir(cifar.c_str(), 0755), 0);
  testing::WriteCifarFolder(cifar, 2, 2);
  std::atomic<bool> cancel{true};
  data::ReadOptions options;
  options.roots = {root_};
  options.cancel = &cancel;
  EXPECT_EQ(data::ReadCifar10Folder(cifar, options).status().code(), absl::StatusCode::kCancelled);
  cancel = false;
  EXPECT_TRUE(data::ReadCifar10Folder(cifar, options).ok());
}

}  // namespace
}  // namespace stoke
