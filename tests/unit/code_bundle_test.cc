// A Python model's code as it travels with its job: read from a file or a package folder,
// refused when it is not plain code or too large, fingerprinted the same however listed,
// and written back unchanged.
#include "spec/code_bundle.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include "tests/support/temp_dir.h"

namespace stoke::spec {
namespace {

void Write(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

std::string Read(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

v1::CodeBundle Bundle(std::initializer_list<std::pair<std::string, std::string>> files) {
  v1::CodeBundle bundle;
  for (const auto& [path, content] : files) {
    auto* file = bundle.add_files();
    file->set_path(path);
    file->set_content(content);
  }
  return bundle;
}

TEST(CodeBundle, ReadsAFileUnderItsOwnName) {
  testing::TempDir dir;
  Write(dir.File("model.py"), "def build_model(): pass\n");
  auto bundle = ReadCodeBundle(dir.File("model.py"), "model.python.file");
  ASSERT_TRUE(bundle.ok()) << bundle.status();
  ASSERT_EQ(bundle->files_size(), 1);
  EXPECT_EQ(bundle->files(0).path(), "model.py");
  EXPECT_EQ(bundle->files(0).content(), "def build_model(): pass\n");
  auto module = EntryModule(*bundle, "", "model.python");
  ASSERT_TRUE(module.ok()) << module.status();
  EXPECT_EQ(*module, "model");
}

TEST(CodeBundle, ReadsAPackageWithoutCachesOrHiddenFiles) {
  testing::TempDir dir;
  const std::string package = dir.File("mynet");
  ASSERT_EQ(mkdir(package.c_str(), 0755), 0);
  ASSERT_EQ(mkdir((package + "/layers").c_str(), 0755), 0);
  ASSERT_EQ(mkdir((package + "/__pycache__").c_str(), 0755), 0);
  ASSERT_EQ(mkdir((package + "/.git").c_str(), 0755), 0);
  Write(package + "/__init__.py", "from .layers.attention import build_model\n");
  Write(package + "/layers/attention.py", "def build_model(): pass\n");
  Write(package + "/__pycache__/x.cpython-311.pyc", "bytecode");
  Write(package + "/.git/HEAD", "ref");
  Write(package + "/layers/old.pyc", "bytecode");
  auto bundle = ReadCodeBundle(package + "/", "model.python.file");
  ASSERT_TRUE(bundle.ok()) << bundle.status();
  ASSERT_EQ(bundle->files_size(), 2);
  EXPECT_EQ(bundle->files(0).path(), "mynet/__init__.py");
  EXPECT_EQ(bundle->files(1).path(), "mynet/layers/attention.py");
  EXPECT_TRUE(CheckCodeBundle(*bundle, "f").ok());
  EXPECT_EQ(*EntryModule(*bundle, "", "model.python"), "mynet");
  EXPECT_EQ(*EntryModule(*bundle, "mynet.layers.attention", "model.python"),
            "mynet.layers.attention");
}

TEST(CodeBundle, RefusesLinksFifosAndWhatIsNotCode) {
  testing::TempDir dir;
  const std::string package = dir.File("pkg");
  ASSERT_EQ(mkdir(package.c_str(), 0755), 0);
  Write(package + "/__init__.py", "");
  ASSERT_EQ(symlink("/etc/passwd", (package + "/secrets.py").c_str()), 0);
  auto linked = ReadCodeBundle(package, "model.python.file");
  ASSERT_FALSE(linked.ok());
  EXPECT_EQ(linked.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(linked.status().message().find("model.python.file: " + package +
                                           "/secrets.py: a "
                                           "symbolic link"),
            std::string::npos)
      << linked.status();

  ASSERT_EQ(unlink((package + "/secrets.py").c_str()), 0);
  ASSERT_EQ(mkfifo((package + "/pipe").c_str(), 0644), 0);
  auto fifo = ReadCodeBundle(package, "model.python.file");
  ASSERT_FALSE(fifo.ok());  // and it returned: a FIFO is never opened, so never waited on
  EXPECT_NE(fifo.status().message().find("pipe"), std::string::npos) << fifo.status();

  Write(dir.File("weights.bin"), "x");
  auto not_code = ReadCodeBundle(dir.File("weights.bin"), "model.python.file");
  ASSERT_FALSE(not_code.ok());
  EXPECT_NE(not_code.status().message().find("expected a .py file"), std::string::npos);
  auto missing = ReadCodeBundle(dir.File("nothing.py"), "model.python.file");
  EXPECT_FALSE(missing.ok());
}

TEST(CodeBundle, RefusesMoreThanEightMebibytesNamingDataRoots) {
  testing::TempDir dir;
  const std::string package = dir.File("big");
  ASSERT_EQ(mkdir(package.c_str(), 0755), 0);
  Write(package + "/__init__.py", "");
  Write(package + "/weights.py", std::string(kMaxCodeBytes + 1, 'w'));
  auto bundle = ReadCodeBundle(package, "model.python.file");
  ASSERT_FALSE(bundle.ok());
  EXPECT_NE(bundle.status().message().find("at most 8 MiB"), std::string::npos) << bundle.status();
  EXPECT_NE(bundle.status().message().find("data root"), std::string::npos) << bundle.status();
}

TEST(CodeBundle, ChecksPathsTheCoordinatorIsSent) {
  EXPECT_TRUE(CheckCodeBundle(Bundle({{"a.py", "x"}, {"pkg/b.py", "y"}}), "f").ok());
  for (const std::string bad : {"/etc/x.py", "../x.py", "pkg/../x.py", "pkg//x.py", "./x.py", ""}) {
    auto status = CheckCodeBundle(Bundle({{bad, "x"}}), "model.python.file");
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << "accepted " << bad;
    EXPECT_NE(status.message().find("model.python.file: "), std::string::npos) << status;
  }
  EXPECT_FALSE(CheckCodeBundle(Bundle({{"a.py", "x"}, {"a.py", "y"}}), "f").ok());
  EXPECT_FALSE(CheckCodeBundle(Bundle({{"a", "x"}, {"a/b.py", "y"}}), "f").ok());
  auto empty = CheckCodeBundle(v1::CodeBundle(), "model.python.file");
  EXPECT_NE(empty.message().find("no code was sent"), std::string::npos) << empty;
}

TEST(CodeBundle, DigestDependsOnContentNotOrder) {
  const auto one = Bundle({{"a.py", "x"}, {"b.py", "y"}});
  const auto other_order = Bundle({{"b.py", "y"}, {"a.py", "x"}});
  const auto changed = Bundle({{"a.py", "x"}, {"b.py", "z"}});
  // A file boundary moved is another bundle, though the bytes run on the same.
  const auto moved = Bundle({{"a.py", "xb.py"}, {"y", ""}});
  EXPECT_EQ(CodeDigest(one), CodeDigest(other_order));
  EXPECT_NE(CodeDigest(one), CodeDigest(changed));
  EXPECT_NE(CodeDigest(one), CodeDigest(moved));
  EXPECT_EQ(CodeDigest(one).size(), 64u);
}

TEST(CodeBundle, EntryModuleMustBeImportable) {
  EXPECT_FALSE(EntryModule(Bundle({{"my-model.py", ""}}), "", "model.python").ok());
  EXPECT_FALSE(EntryModule(Bundle({{"a.py", ""}, {"b.py", ""}}), "", "model.python").ok());
  EXPECT_EQ(*EntryModule(Bundle({{"a.py", ""}, {"b.py", ""}}), "b", "model.python"), "b");
  auto absent = EntryModule(Bundle({{"a.py", ""}}), "c", "model.python");
  ASSERT_FALSE(absent.ok());
  EXPECT_NE(absent.status().message().find("model.python.module"), std::string::npos);
}

TEST(CodeBundle, RecordsModuleDigestAndSizeInTheSpec) {
  v1::PythonModelSpec python;
  const auto bundle = Bundle({{"vit.py", "print(1)\n"}});
  ASSERT_TRUE(RecordCode(bundle, python).ok());
  EXPECT_EQ(python.module(), "vit");
  EXPECT_EQ(python.code_sha256(), CodeDigest(bundle));
  EXPECT_EQ(python.code_bytes(), 9u);
}

TEST(CodeBundle, WritesWhatItReadsAndNeverThroughALink) {
  testing::TempDir dir;
  const auto bundle = Bundle({{"pkg/__init__.py", "A"}, {"pkg/sub/m.py", "B"}});
  ASSERT_TRUE(WriteCodeBundle(bundle, dir.File("code")).ok());
  EXPECT_EQ(Read(dir.File("code/pkg/__init__.py")), "A");
  EXPECT_EQ(Read(dir.File("code/pkg/sub/m.py")), "B");
  auto again = ReadCodeBundle(dir.File("code/pkg"), "f");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(CodeDigest(*again), CodeDigest(bundle));

  // A file planted where one is to be written is not written through.
  Write(dir.File("target"), "untouched");
  ASSERT_EQ(mkdir(dir.File("planted").c_str(), 0755), 0);
  ASSERT_EQ(symlink(dir.File("target").c_str(), dir.File("planted/m.py").c_str()), 0);
  EXPECT_FALSE(WriteCodeBundle(Bundle({{"m.py", "evil"}}), dir.File("planted")).ok());
  EXPECT_EQ(Read(dir.File("target")), "untouched");
}

TEST(CodeBundle, AWorkingFolderTravelsWholeUnderItsName) {
  testing::TempDir dir;
  const std::string folder = dir.File("run");
  ASSERT_EQ(mkdir(folder.c_str(), 0755), 0);
  Write(folder + "/train.py", "print('hi')\n");
  Write(folder + "/config.json", "{}");
  auto bundle = ReadWorkdir(folder);
  ASSERT_TRUE(bundle.ok()) << bundle.status();
  EXPECT_EQ(bundle->files_size(), 2);
  EXPECT_EQ(WorkdirName(*bundle), "run");
  v1::JobSpec spec;
  ASSERT_TRUE(RecordWorkdir(*bundle, *spec.mutable_command()).ok());
  EXPECT_EQ(spec.command().code_sha256(), CodeDigest(*bundle));
  EXPECT_EQ(spec.command().code_bytes(), 14u);
  EXPECT_EQ(CodeDigestOf(spec), CodeDigest(*bundle));

  // A file is not a folder; files in two folders are not one working folder.
  const auto file = ReadWorkdir(folder + "/train.py");
  ASSERT_FALSE(file.ok());
  EXPECT_NE(file.status().message().find("command.workdir"), std::string::npos);
  const auto scattered =
      RecordWorkdir(Bundle({{"a/x.py", "1"}, {"b/y.py", "2"}}), *spec.mutable_command());
  EXPECT_NE(scattered.message().find("command.workdir"), std::string::npos) << scattered;
  EXPECT_EQ(WorkdirName(Bundle({{"x.py", "1"}})), "");
}

}  // namespace
}  // namespace stoke::spec
