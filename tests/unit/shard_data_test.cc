// data.shards on CPU: the tar index against Python's tarfile (ustar, GNU long names, pax,
// links and folders passed over, damaged archives), brace patterns, samples grouped by
// key with .cls and .json labels, .npy and .txt samples read as stored, the order each rank
// streams its shards in, and OpenData resuming at the exact sample a run without a restart
// reads there.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "formats/shard_files.h"
#include "formats/tar_index.h"
#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"
#include "worker/common/status_error.h"
#include "worker/data/shard_order.h"
#include "worker/data/sources.h"

namespace stoke::worker {
namespace {

using ::stoke::testing::CommandResult;
using ::stoke::testing::RunCommand;
using ::stoke::testing::TempDir;

const std::string kExamples = std::string(STOKE_SOURCE_DIR) + "/examples";

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// Runs Python (standard library only); the script sees the folder as `d`.
void Python(const std::string& dir, const std::string& script) {
  const CommandResult r = RunCommand(
      {"/usr/bin/python3", "-c", "import sys, io, tarfile\nd = sys.argv[1]\n" + script, dir});
  ASSERT_EQ(r.exit_code, 0) << r.err;
}

// Fashion-MNIST pictures (`per_class` of each of 10 classes, 20 x 20) packed into shards of
// `per_shard` samples: DIR/shards/train-NNNN.tar; returns the brace pattern.
std::string MakeShards(const TempDir& dir, int per_class, int per_shard, bool json = false) {
  const CommandResult images =
      RunCommand({"/usr/bin/python3", kExamples + "/images/make_images.py", "folder",
                  dir.File("images"), std::to_string(per_class), "--size", "20"});
  EXPECT_EQ(images.exit_code, 0) << images.err;
  std::vector<std::string> pack = {"/usr/bin/python3",
                                   kExamples + "/shards/make_shards.py",
                                   dir.File("images/train"),
                                   dir.File("shards/train"),
                                   "--per-shard",
                                   std::to_string(per_shard)};
  if (json) pack.push_back("--json");
  const CommandResult packed = RunCommand(pack);
  EXPECT_EQ(packed.exit_code, 0) << packed.err;
  return packed.out.substr(0, packed.out.find('\n'));
}

// ---------------------------------------------------------------------------------------
// The tar index

TEST(TarIndex, FindsEveryRegularMemberAsPythonWroteItWithLongNamesAndPaxPaths) {
  TempDir dir;
  Python(dir.path(), R"(
def add(t, name, data):
    i = tarfile.TarInfo(name); i.size = len(data); t.addfile(i, io.BytesIO(data))
long = "a/" + "b" * 120 + ".cls"
with tarfile.open(d + "/gnu.tar", "w", format=tarfile.GNU_FORMAT) as t:
    add(t, "k1.cls", b"3"); add(t, long, b"7" * 700)
    t.addfile(tarfile.TarInfo("folder/"))  # size 0, type regular; made a folder below
    link = tarfile.TarInfo("k1.lnk"); link.type = tarfile.SYMTYPE; link.linkname = "k1.cls"
    t.addfile(link)
with tarfile.open(d + "/pax.tar", "w", format=tarfile.PAX_FORMAT) as t:
    add(t, "\u00e9t\u00e9/" + "c" * 150 + ".jpg", b"x" * 1000)
    add(t, "short.cls", b"12")
)");
  auto gnu = data::ReadTarIndex(dir.File("gnu.tar"), {}, [](const std::string&) { return true; });
  ASSERT_TRUE(gnu.ok()) << gnu.status();
  // The symbolic link is passed over; the empty "folder/" member is a file of no bytes.
  ASSERT_EQ(gnu->size(), 3u);
  EXPECT_EQ((*gnu)[0].name, "k1.cls");
  EXPECT_EQ((*gnu)[0].content, "3");
  EXPECT_EQ((*gnu)[1].name, "a/" + std::string(120, 'b') + ".cls");
  EXPECT_EQ((*gnu)[1].size, 700);
  EXPECT_EQ((*gnu)[1].content, std::string(700, '7'));
  auto pax = data::ReadTarIndex(dir.File("pax.tar"), {});
  ASSERT_TRUE(pax.ok()) << pax.status();
  ASSERT_EQ(pax->size(), 2u);
  EXPECT_EQ((*pax)[0].name, "\xc3\xa9t\xc3\xa9/" + std::string(150, 'c') + ".jpg");
  EXPECT_TRUE((*pax)[0].content.empty()) << "read without being asked for";
  // The offset is where the contents lie: read back, they are the bytes written.
  std::ifstream in(dir.File("pax.tar"), std::ios::binary);
  in.seekg((*pax)[0].offset);
  std::string bytes(1000, '\0');
  in.read(bytes.data(), 1000);
  EXPECT_EQ(bytes, std::string(1000, 'x'));
}

TEST(TarIndex, DamagedAndForeignFilesAreRefusedNamingTheFileAndTheByte) {
  TempDir dir;
  Python(dir.path(), R"(
with tarfile.open(d + "/ok.tar", "w") as t:
    for k in range(3):
        i = tarfile.TarInfo(f"{k}.jpg"); i.size = 5000; t.addfile(i, io.BytesIO(b"j" * 5000))
data = open(d + "/ok.tar", "rb").read()
open(d + "/cut.tar", "wb").write(data[:7000])
bad = bytearray(data); bad[5120 + 512 + 10] ^= 0xff  # in the second header's name
open(d + "/flipped.tar", "wb").write(bytes(bad))
open(d + "/text.tar", "wb").write(b"not a tar" * 100)
)");
  ASSERT_TRUE(data::ReadTarIndex(dir.File("ok.tar"), {}).ok());
  const auto cut = data::ReadTarIndex(dir.File("cut.tar"), {});
  EXPECT_EQ(cut.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_PRED2(Contains, std::string(cut.status().message()),
               dir.File("cut.tar") + ": damaged tar at byte 5632: a member of 5000 bytes runs");
  const auto flipped = data::ReadTarIndex(dir.File("flipped.tar"), {});
  EXPECT_EQ(flipped.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_PRED2(Contains, std::string(flipped.status().message()), "fails its checksum");
  const auto text = data::ReadTarIndex(dir.File("text.tar"), {});
  EXPECT_EQ(text.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_PRED2(Contains, std::string(text.status().message()), "text.tar: not a tar file");
  EXPECT_EQ(data::ReadTarIndex(dir.File("none.tar"), {}).status().code(),
            absl::StatusCode::kNotFound);
}

// ---------------------------------------------------------------------------------------
// Brace patterns

TEST(ExpandBracePattern, RangesKeepTheirPaddingAndListsMultiply) {
  using V = std::vector<std::string>;
  EXPECT_EQ(
      *data::ExpandBracePattern("/d/train-{0008..0011}.tar"),
      (V{"/d/train-0008.tar", "/d/train-0009.tar", "/d/train-0010.tar", "/d/train-0011.tar"}));
  EXPECT_EQ(*data::ExpandBracePattern("s{8..10}.tar"), (V{"s8.tar", "s9.tar", "s10.tar"}));
  EXPECT_EQ(*data::ExpandBracePattern("{a,b}-{0..1}.tar"),
            (V{"a-0.tar", "a-1.tar", "b-0.tar", "b-1.tar"}));
  EXPECT_EQ(*data::ExpandBracePattern("plain.tar"), (V{"plain.tar"}));
}

TEST(ExpandBracePattern, MalformedPatternsAreRefusedSayingWhy) {
  for (const auto& [pattern, why] : std::vector<std::pair<std::string, std::string>>{
           {"s-{0..3.tar", "unbalanced"},
           {"s-0..3}.tar", "a '}' with no '{'"},
           {"s-{5..2}.tar", "the first not above the last"},
           {"s-{x..2}.tar", "two numbers"},
           {"s-{one}.tar", "a range {0..9} or a list {a,b}"},
           {"s-{0..999999}.tar", "names more than 100000 files"}}) {
    const auto expanded = data::ExpandBracePattern(pattern);
    EXPECT_EQ(expanded.status().code(), absl::StatusCode::kInvalidArgument) << pattern;
    EXPECT_PRED2(Contains, std::string(expanded.status().message()), why);
  }
}

// ---------------------------------------------------------------------------------------
// Samples

TEST(ListShardSplit, SamplesAreGroupedByKeyWithClsOrJsonLabelsAndHeldOutEveryKth) {
  for (bool json : {false, true}) {
    SCOPED_TRACE(json ? "json labels" : "cls labels");
    TempDir dir;
    const std::string pattern = MakeShards(dir, 10, 30, json);  // 100 samples, 4 shards
    ASSERT_EQ(pattern, dir.File("shards/train-{0000..0003}.tar"));
    data::ShardSplitNames names;
    names.urls = pattern;
    names.val_fraction = 0.1;
    auto split = data::ListShardSplit(names);
    ASSERT_TRUE(split.ok()) << split.status();
    EXPECT_EQ(split->shards.size(), 4u);
    EXPECT_EQ(split->train_per_shard, (std::vector<int64_t>{27, 27, 27, 9}));
    EXPECT_EQ(split->val.size(), 10u);
    EXPECT_EQ(split->num_classes, 10);
    // Every class appears ten times, as the folders held them.
    std::vector<int> per_class(10, 0);
    for (const auto* list : {&split->train, &split->val}) {
      for (const data::ImageFile& f : *list) ++per_class[static_cast<size_t>(f.label)];
    }
    EXPECT_EQ(per_class, std::vector<int>(10, 10));
    EXPECT_EQ(data::DescribeImageFile(split->train[0], {}),
              dir.File("shards/train-0000.tar") + ":00000000.jpg");
  }
}

TEST(ListShardSamples, ASampleWithoutALabelOrImageIsRefusedNamingShardAndKey) {
  TempDir dir;
  Python(dir.path(), R"(
def add(t, name, data):
    i = tarfile.TarInfo(name); i.size = len(data); t.addfile(i, io.BytesIO(data))
with tarfile.open(d + "/nolabel.tar", "w") as t:
    add(t, "a.jpg", b"x"); add(t, "a.cls", b"1"); add(t, "b.jpg", b"x")
with tarfile.open(d + "/badlabel.tar", "w") as t:
    add(t, "a.png", b"x"); add(t, "a.json", b'{"label": "cat"}')
with tarfile.open(d + "/noinput.tar", "w") as t:
    add(t, "a.cls", b"1")
with tarfile.open(d + "/mixed.tar", "w") as t:
    add(t, "a.jpg", b"x"); add(t, "a.cls", b"1"); add(t, "b.txt", b"text"); add(t, "b.cls", b"0")
)");
  const auto no_label = data::ListShardSamples(dir.File("nolabel.tar"));
  EXPECT_PRED2(Contains, std::string(no_label.status().message()),
               dir.File("nolabel.tar") + ": sample \"b\": has no label (.cls or .json)");
  const auto bad_label = data::ListShardSamples(dir.File("badlabel.tar"));
  EXPECT_PRED2(Contains, std::string(bad_label.status().message()),
               dir.File("badlabel.tar") + ":a.json: its label is no class index");
  const auto no_input = data::ListShardSamples(dir.File("noinput.tar"));
  EXPECT_PRED2(Contains, std::string(no_input.status().message()),
               "sample \"a\": has no input: an image (.jpg, .png), array (.npy) or text (.txt)");
  const auto mixed = data::ListShardSamples(dir.File("mixed.tar"));
  EXPECT_PRED2(Contains, std::string(mixed.status().message()),
               "sample \"b\": has no input of the kind the shard's first sample holds: images");
}

// ---------------------------------------------------------------------------------------
// The order ranks stream their shards in

ShardStream Stream(int rank, int world, int64_t buffer = 8) {
  ShardStream s;
  s.shard_sizes = {10, 12, 9, 11, 10};  // ids 0-9, 10-21, 22-30, 31-41, 42-51
  s.rank = rank;
  s.world_size = world;
  s.seed = 7;
  s.shuffle_buffer = buffer;
  return s;
}

int ShardOf(int64_t id) {
  const int64_t firsts[] = {0, 10, 22, 31, 42, 52};
  int k = 0;
  while (id >= firsts[k + 1]) ++k;
  return k;
}

TEST(ShardEpochOrder, EachRankReadsOnlyItsOwnShardsAsManySamplesAsTheOthers) {
  // Rank 0 owns shards 0, 2, 4 (29 samples), rank 1 shards 1, 3 (23): both take 23.
  EXPECT_EQ(ShardSamplesPerRank(Stream(0, 2)), 23);
  for (int rank = 0; rank < 2; ++rank) {
    for (int64_t epoch = 0; epoch < 3; ++epoch) {
      const std::vector<int64_t> order = ShardEpochOrder(Stream(rank, 2), epoch);
      ASSERT_EQ(order.size(), 23u);
      EXPECT_EQ(std::set<int64_t>(order.begin(), order.end()).size(), 23u) << "a sample twice";
      for (int64_t id : order) EXPECT_EQ(ShardOf(id) % 2, rank) << "sample " << id;
    }
  }
  try {
    ShardSamplesPerRank(Stream(0, 6));
    ADD_FAILURE() << "5 shards were shared among 6 ranks";
  } catch (const std::invalid_argument& e) {
    EXPECT_PRED2(Contains, e.what(), "data.shards.urls: 5 shard(s) for 6 ranks");
  }
}

TEST(ShardEpochOrder, ASampleLeavesTheBufferWithinItsSizeOfBeingReadAndEpochsDiffer) {
  const ShardStream stream = Stream(0, 1, /*buffer=*/8);
  const std::vector<int64_t> first = ShardEpochOrder(stream, 0);
  ASSERT_EQ(first.size(), 52u);
  EXPECT_EQ(ShardEpochOrder(stream, 0), first) << "the same (seed, epoch) gave another order";
  EXPECT_NE(ShardEpochOrder(stream, 1), first);
  // Shards are read whole, one after another, in the order their first samples come
  // out; the i-th sample out must be among the first i + 8 (the buffer) read.
  std::vector<int> shards_read;
  for (int64_t id : first) {
    if (std::find(shards_read.begin(), shards_read.end(), ShardOf(id)) == shards_read.end()) {
      shards_read.push_back(ShardOf(id));
    }
  }
  ASSERT_EQ(shards_read.size(), 5u);
  const int64_t firsts[] = {0, 10, 22, 31, 42, 52};
  std::vector<int64_t> stream_position(52);
  int64_t read = 0;
  for (int k : shards_read) {
    for (int64_t id = firsts[k]; id < firsts[k + 1]; ++id) {
      stream_position[static_cast<size_t>(id)] = read++;
    }
  }
  for (size_t i = 0; i < first.size(); ++i) {
    EXPECT_LT(stream_position[static_cast<size_t>(first[i])], static_cast<int64_t>(i) + 8)
        << "sample " << first[i] << " left the buffer at " << i;
  }
  ShardStream stored = stream;
  stored.shuffle = false;
  const std::vector<int64_t> in_order = ShardEpochOrder(stored, 3);
  for (size_t i = 0; i < in_order.size(); ++i) EXPECT_EQ(in_order[i], static_cast<int64_t>(i));
}

// ---------------------------------------------------------------------------------------
// OpenData

TrainTask ShardTask(const std::string& pattern) {
  TrainTask task;
  ShardDataConfig shards;
  shards.urls = pattern;
  shards.size = 16;
  shards.channels = 1;
  shards.shuffle_buffer = 50;
  task.data.source = shards;
  task.data.loader.threads = 3;
  task.training.batch_size = 16;
  task.training.seed = 11;
  return task;
}

TEST(OpenData, AResumedShardStreamReadsTheSamplesARunWithoutARestartReadsThere) {
  TempDir dir;
  const std::string pattern = MakeShards(dir, 20, 50);  // 200 samples, 4 shards
  const TrainTask task = ShardTask(pattern);
  DataPipeline straight = OpenData(task, torch::kCPU, 0);
  // 180 training samples (every tenth held out): 11 batches of 16 an epoch.
  ASSERT_EQ(straight.train->BatchesPerEpoch(), 11);
  EXPECT_EQ(straight.train->Shape().num_classes, 10);
  std::vector<Batch> batches(30);
  for (Batch& batch : batches) batch = straight.train->Next();
  // A restart after 17 batches (into the second epoch), and one at an epoch's start.
  for (int64_t resume : {17, 22}) {
    SCOPED_TRACE(::testing::Message() << "resumed at batch " << resume);
    DataPipeline resumed = OpenData(task, torch::kCPU, resume);
    for (int64_t b = resume; b < 30; ++b) {
      const Batch batch = resumed.train->Next();
      ASSERT_TRUE(torch::equal(batch.targets, batches[static_cast<size_t>(b)].targets))
          << "batch " << b;
      ASSERT_TRUE(torch::equal(batch.inputs, batches[static_cast<size_t>(b)].inputs))
          << "batch " << b;
    }
  }
  // The stream is shuffled: the first batch is not the first shard's first samples.
  EXPECT_FALSE(torch::equal(batches[0].targets, batches[11].targets));
}

TEST(OpenData, AMissingShardIsNamedAndFewerShardsThanRanksAreRefused) {
  TempDir dir;
  const std::string pattern = MakeShards(dir, 10, 50);  // 100 samples, 2 shards
  TrainTask task = ShardTask(dir.File("shards/train-{0000..0002}.tar"));
  try {
    OpenData(task, torch::kCPU, 0);
    ADD_FAILURE() << "a missing shard was not noticed";
  } catch (const StatusError& e) {
    EXPECT_PRED2(Contains, e.what(),
                 "data.shards.urls: " + dir.File("shards/train-0002.tar") + ": cannot open");
  }
  task = ShardTask(pattern);
  task.world_size = 3;
  task.rank = 2;
  EXPECT_THROW(OpenData(task, torch::kCPU, 0), std::invalid_argument);
}

// ---------------------------------------------------------------------------------------
// Array and text samples

// Two shards of 20 samples each: sample k's input is an array of `shape` and `dtype`
// holding k + the element's place (as NumPy writes it), or the text "text k" followed by k
// 'x's; its label is k % 3. `odd` (a shape) replaces sample 7's array.
void MakeMemberShards(const TempDir& dir, const std::string& kind, const std::string& shape,
                      const std::string& dtype, const std::string& odd = "") {
  const CommandResult r = RunCommand({"/usr/bin/python3", "-c", R"(
import io, sys, tarfile, numpy as np
d, kind, shape, dtype, odd = sys.argv[1:6]
def add(t, name, data):
    i = tarfile.TarInfo(name); i.size = len(data); t.addfile(i, io.BytesIO(data))
for s in range(2):
    with tarfile.open(f"{d}/m-{s}.tar", "w") as t:
        for j in range(20):
            k = s * 20 + j
            if kind == "npy":
                dims = eval(odd) if odd and k == 7 else eval(shape)
                a = (np.arange(int(np.prod(dims))) + k).reshape(dims).astype(dtype)
                b = io.BytesIO(); np.save(b, a); add(t, f"{k:05d}.npy", b.getvalue())
            else:
                add(t, f"{k:05d}.txt", (f"text {k} " + "x" * k).encode())
            add(t, f"{k:05d}.cls", str(k % 3).encode())
)",
                                      dir.path(), kind, shape, dtype, odd});
  ASSERT_EQ(r.exit_code, 0) << r.err;
}

TEST(ListShardSplit, NpyAndTxtSamplesAreArraysAndTextsWhoseHeadersAreRead) {
  TempDir dir;
  MakeMemberShards(dir, "npy", "(4, 3)", "float32");
  data::ShardSplitNames names;
  names.urls = dir.File("m-{0..1}.tar");
  auto split = data::ListShardSplit(names);
  ASSERT_TRUE(split.ok()) << split.status();
  EXPECT_EQ(split->input, data::ShardInput::kArray);
  EXPECT_EQ(split->num_classes, 3);
  auto header = data::ReadShardArrayHeader(split->train[0]);
  ASSERT_TRUE(header.ok()) << header.status();
  EXPECT_EQ(header->dtype, data::ArrayDtype::kFloat32);
  EXPECT_EQ(header->shape, (std::vector<int64_t>{4, 3}));
  EXPECT_EQ(header->data_bytes, 48);

  TempDir text;
  MakeMemberShards(text, "txt", "", "");
  names.urls = text.File("m-{0..1}.tar");
  auto texts = data::ListShardSplit(names);
  ASSERT_TRUE(texts.ok()) << texts.status();
  EXPECT_EQ(texts->input, data::ShardInput::kText);
  // A set whose shards hold different inputs is refused, naming the odd shard.
  ASSERT_EQ(std::rename(dir.File("m-1.tar").c_str(), text.File("m-1.tar").c_str()), 0);
  const auto mixed = data::ListShardSplit(names);
  EXPECT_PRED2(Contains, std::string(mixed.status().message()),
               text.File("m-1.tar") + ": its samples hold arrays (.npy), the first shard's texts");
}

TEST(ShardMemberDataset, ArrayRowsAreTheStoredValuesAndAnOddShapeIsSkippedAndCounted) {
  TempDir dir;
  MakeMemberShards(dir, "npy", "(4, 3)", "float32", /*odd=*/"(5, 3)");
  TrainTask task = ShardTask(dir.File("m-{0..1}.tar"));
  task.data.loader.shuffle = false;
  task.data.max_bad_fraction = 0.1;
  task.training.batch_size = 36;  // the 36 training samples (every tenth held out), in order
  DataPipeline pipeline = OpenData(task, torch::kCPU, 0);
  EXPECT_EQ(pipeline.train->Shape().kind, DataShape::Kind::kVector);
  EXPECT_EQ(pipeline.train->Shape().sample, (std::vector<int64_t>{4, 3}));
  const Batch batch = pipeline.train->Next();
  ASSERT_EQ(batch.inputs.sizes(), (std::vector<int64_t>{36, 4, 3}));
  EXPECT_EQ(batch.inputs.scalar_type(), torch::kFloat32);
  int checked = 0;
  for (int64_t row = 0; row < 36; ++row) {
    // Row r holds training sample r: sample k = r + r / 9 (every tenth held out).
    const int64_t k = row + row / 9;
    if (k == 7) continue;  // replaced by another sample
    const torch::Tensor expected = torch::arange(12, torch::kFloat32).view({4, 3}) + k;
    EXPECT_TRUE(torch::equal(batch.inputs[row], expected)) << "sample " << k;
    EXPECT_EQ(batch.targets[row].item<int64_t>(), k % 3);
    ++checked;
  }
  EXPECT_EQ(checked, 35);
  // Counted each time it is met: the loader has read ahead into later batches too.
  EXPECT_GE(pipeline.train->SkippedSamples(), 1);
}

TEST(ShardMemberDataset, TextRowsAreByteIdsCutOrPaddedWithZeros) {
  TempDir dir;
  MakeMemberShards(dir, "txt", "", "");
  TrainTask task = ShardTask(dir.File("m-{0..1}.tar"));
  auto& shards = std::get<ShardDataConfig>(task.data.source);
  shards.text_length = 12;
  task.data.loader.shuffle = false;
  task.training.batch_size = 36;
  DataPipeline pipeline = OpenData(task, torch::kCPU, 0);
  EXPECT_EQ(pipeline.train->Shape().sample, (std::vector<int64_t>{12}));
  const Batch batch = pipeline.train->Next();
  ASSERT_EQ(batch.inputs.scalar_type(), torch::kLong) << "ids a model embeds";
  for (int64_t row : {0, 1, 20, 35}) {
    const int64_t k = row + row / 9;
    std::string text = "text " + std::to_string(k) + " " + std::string(static_cast<size_t>(k), 'x');
    text.resize(12, '\0');
    std::vector<int64_t> ids(text.begin(), text.end());
    EXPECT_TRUE(torch::equal(batch.inputs[row], torch::tensor(ids))) << "sample " << k;
  }
}

}  // namespace
}  // namespace stoke::worker
