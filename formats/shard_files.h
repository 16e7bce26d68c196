// The samples of data.shards: WebDataset-style tar shards, each sample the members that
// share a key (a member's name up to the first dot of its base name): an input and a label
// (.cls: an integer; .json: {"label": N} or a bare integer). The input is an image (.jpg,
// .jpeg or .png), else a NumPy array (.npy), else a text (.txt): the first of these the
// set's first sample holds, and every sample must hold one of that kind. Shards are named
// by a brace pattern and indexed whole at open, headers only: each sample is then read by
// its place in its shard. Torch-free.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "formats/array_file.h"
#include "formats/image_files.h"
#include "formats/read_options.h"

namespace stoke::data {

// Expands brace ranges ("train-{0000..0127}.tar", zero-padded to the bounds' width when
// they are) and lists ("{train,extra}-{0..3}.tar"), left to right. INVALID_ARGUMENT for an
// unbalanced brace, a range with a non-number bound or backwards, or more than
// `max_names` names.
absl::StatusOr<std::vector<std::string>> ExpandBracePattern(const std::string& pattern,
                                                            size_t max_names = 100000);

// What the samples of a set of shards feed a model.
enum class ShardInput { kImage, kArray, kText };
// "images (.jpg, .jpeg, .png)", "arrays (.npy)", "texts (.txt)".
const char* ShardInputName(ShardInput input);

// One shard's samples in archive order, as ImageFile entries locating each one's input
// within the shard (ImageFile::offset), and in `input` (when given) what that input is.
// INVALID_ARGUMENT naming the shard and the sample's key for a sample without an input of
// the first sample's kind or a label, or a label that is no class index.
absl::StatusOr<std::vector<ImageFile>> ListShardSamples(const std::string& shard,
                                                        const ReadOptions& options = {},
                                                        ShardInput* input = nullptr);

// The header of an array sample's .npy member, from its first `max_bytes` only (a header
// longer than that is refused): the member's size, which its tar header gives and no more
// than the file's, is checked against the shape, never read or allocated. Errors name the
// member ("SHARD:MEMBER").
absl::StatusOr<NpyHeader> ReadShardArrayHeader(const ImageFile& sample,
                                               const ReadOptions& options = {},
                                               size_t max_bytes = size_t{1} << 20);

struct ShardSplitNames {
  std::string urls;      // the training shards' pattern
  std::string val_urls;  // held-out shards; empty: every k-th sample of the training ones
  double val_fraction = 0.1;
};

struct ShardSplit {
  std::vector<std::string> shards;       // training shards, in the pattern's order
  std::vector<int64_t> train_per_shard;  // training samples of each
  std::vector<ImageFile> train;          // all training samples, shard after shard
  std::vector<ImageFile> val;
  int64_t num_classes = 0;                // the largest label plus one
  ShardInput input = ShardInput::kImage;  // the same in every shard
};

// Samples every rank reads an epoch when shard k belongs to rank k mod world_size: the
// fewest any rank's shards hold, so that all ranks run as many steps. 0 when there are
// fewer shards than ranks.
int64_t SamplesPerRank(const std::vector<int64_t>& per_shard, int world_size);

// Indexes every shard named (on up to `threads` threads). Errors name the field
// (data.shards.urls, ...) and the shard: a missing or damaged shard, no samples, a shard
// whose samples' input differs from the first shard's.
absl::StatusOr<ShardSplit> ListShardSplit(const ShardSplitNames& names,
                                          const ReadOptions& options = {}, int threads = 8);

}  // namespace stoke::data
