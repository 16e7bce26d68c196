#include "formats/shard_files.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "formats/tar_index.h"

namespace stoke::data {
namespace {

// Labels larger than this are no class index.
constexpr int64_t kMaxLabel = 1 << 20;

absl::Status Bad(const std::string& what, const std::string& problem) {
  return absl::InvalidArgumentError(absl::StrCat(what, ": ", problem));
}

absl::Status InField(const std::string& field, const absl::Status& s) {
  return absl::Status(s.code(), absl::StrCat(field, ": ", s.message()));
}

// The alternatives one brace group stands for: a range "A..B" or a list "a,b,c".
absl::StatusOr<std::vector<std::string>> Alternatives(const std::string& pattern,
                                                      const std::string& group) {
  const size_t dots = group.find("..");
  if (dots != std::string::npos) {
    const std::string low = group.substr(0, dots);
    const std::string high = group.substr(dots + 2);
    int64_t from = 0, to = 0;
    if (!absl::SimpleAtoi(low, &from) || !absl::SimpleAtoi(high, &to) || from < 0 || to < from) {
      return Bad(pattern, absl::StrCat("{", group,
                                       "}: a range is {FIRST..LAST}, two numbers, "
                                       "the first not above the last"));
    }
    const bool padded = (low.size() > 1 && low[0] == '0') || (high.size() > 1 && high[0] == '0');
    const size_t width = padded ? std::max(low.size(), high.size()) : 0;
    std::vector<std::string> names;
    for (int64_t i = from; i <= to; ++i) {
      std::string number = std::to_string(i);
      if (number.size() < width) number.insert(0, width - number.size(), '0');
      names.push_back(std::move(number));
      if (names.size() > 1000000) break;  // ExpandBracePattern's limit refuses it
    }
    return names;
  }
  if (group.find(',') == std::string::npos) {
    return Bad(pattern,
               absl::StrCat("{", group, "}: a brace holds a range {0..9} or a list {a,b}"));
  }
  return std::vector<std::string>(absl::StrSplit(group, ','));
}

// What a member's extension makes it: one of the inputs, or a label.
std::optional<ShardInput> InputOf(const std::string& extension) {
  if (extension == "jpg" || extension == "jpeg" || extension == "png") return ShardInput::kImage;
  if (extension == "npy") return ShardInput::kArray;
  if (extension == "txt") return ShardInput::kText;
  return std::nullopt;
}

bool IsLabel(const std::string& extension) { return extension == "cls" || extension == "json"; }

// A member's key and extension (lower case): "dir/abc.001.jpg" is ("dir/abc", "001.jpg"); a
// sample's label and image are told apart by the extension's last part.
void SplitKey(const std::string& name, std::string* key, std::string* extension) {
  const size_t slash = name.rfind('/');
  const size_t dot = name.find('.', slash == std::string::npos ? 0 : slash + 1);
  *key = name.substr(0, dot);
  const std::string full = dot == std::string::npos ? "" : name.substr(dot + 1);
  *extension = absl::AsciiStrToLower(full.substr(full.rfind('.') + 1));
}

std::string LastExtension(const std::string& name) {
  std::string key, extension;
  SplitKey(name, &key, &extension);
  return extension;
}

absl::StatusOr<int64_t> ParseLabel(const std::string& where, const std::string& extension,
                                   const std::string& text) {
  int64_t label = -1;
  if (extension == "cls") {
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(text), &label)) label = -1;
  } else {
    const auto json = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    const nlohmann::json* value = &json;
    if (json.is_object()) {
      value = json.contains("label") ? &json["label"]
              : json.contains("cls") ? &json["cls"]
                                     : nullptr;
    }
    if (value != nullptr && value->is_number_integer()) label = value->get<int64_t>();
  }
  if (label < 0 || label > kMaxLabel) {
    return Bad(where, absl::StrCat("its label is no class index (an integer from 0 to ", kMaxLabel,
                                   "): \"", text.substr(0, 40), "\""));
  }
  return label;
}

}  // namespace

absl::StatusOr<std::vector<std::string>> ExpandBracePattern(const std::string& pattern,
                                                            size_t max_names) {
  const size_t open = pattern.find('{');
  const size_t stray = pattern.find('}');
  if (open == std::string::npos) {
    if (stray != std::string::npos) return Bad(pattern, "a '}' with no '{'");
    return std::vector<std::string>{pattern};
  }
  const size_t close = pattern.find('}', open);
  if (close == std::string::npos || stray < open) return Bad(pattern, "unbalanced braces");
  const std::string group = pattern.substr(open + 1, close - open - 1);
  if (group.find('{') != std::string::npos) return Bad(pattern, "braces within braces");
  auto alternatives = Alternatives(pattern, group);
  if (!alternatives.ok()) return alternatives.status();
  auto rest = ExpandBracePattern(pattern.substr(close + 1), max_names);
  if (!rest.ok()) return InField(pattern, rest.status());
  if (alternatives->size() * rest->size() > max_names) {
    return Bad(pattern, absl::StrCat("names more than ", max_names, " files"));
  }
  std::vector<std::string> names;
  const std::string head = pattern.substr(0, open);
  for (const std::string& a : *alternatives) {
    for (const std::string& r : *rest) names.push_back(absl::StrCat(head, a, r));
  }
  return names;
}

const char* ShardInputName(ShardInput input) {
  switch (input) {
    case ShardInput::kImage:
      return "images (.jpg, .jpeg, .png)";
    case ShardInput::kArray:
      return "arrays (.npy)";
    case ShardInput::kText:
      return "texts (.txt)";
  }
  return "";
}

absl::StatusOr<std::vector<ImageFile>> ListShardSamples(const std::string& shard,
                                                        const ReadOptions& options,
                                                        ShardInput* input) {
  auto members = ReadTarIndex(shard, options,
                              [](const std::string& name) { return IsLabel(LastExtension(name)); });
  if (!members.ok()) return members.status();
  std::vector<ImageFile> samples;
  std::optional<ShardInput> kind;  // the first sample's
  // Members of one sample are consecutive in the archive, as WebDataset writes them.
  size_t i = 0;
  while (i < members->size()) {
    std::string key, extension;
    SplitKey((*members)[i].name, &key, &extension);
    // Each kind of input's first member in the sample.
    const TarMember* inputs[3] = {nullptr, nullptr, nullptr};
    ImageFile sample;
    sample.path = shard;
    bool labelled = false;
    for (; i < members->size(); ++i) {
      const TarMember& m = (*members)[i];
      std::string member_key;
      SplitKey(m.name, &member_key, &extension);
      if (member_key != key) break;
      if (const auto found = InputOf(extension)) {
        const TarMember*& first = inputs[static_cast<int>(*found)];
        if (first == nullptr) first = &m;
      } else if (IsLabel(extension) && !labelled) {
        const std::string where = absl::StrCat(shard, ":", m.name);
        if (m.content.size() != static_cast<size_t>(m.size)) return Bad(where, "a label too large");
        auto label = ParseLabel(where, extension, m.content);
        if (!label.ok()) return label.status();
        sample.label = *label;
        labelled = true;
      }
    }
    if (!kind) {
      for (ShardInput k : {ShardInput::kImage, ShardInput::kArray, ShardInput::kText}) {
        if (inputs[static_cast<int>(k)] != nullptr) {
          kind = k;
          break;
        }
      }
    }
    const TarMember* chosen = kind ? inputs[static_cast<int>(*kind)] : nullptr;
    if (chosen == nullptr || !labelled) {
      const std::string what = absl::StrCat(shard, ": sample \"", key, "\"");
      if (!labelled) return Bad(what, "has no label (.cls or .json)");
      if (!kind) {
        return Bad(what, "has no input: an image (.jpg, .png), array (.npy) or text (.txt)");
      }
      return Bad(what, absl::StrCat("has no input of the kind the shard's first sample holds: ",
                                    ShardInputName(*kind)));
    }
    sample.offset = chosen->offset;
    sample.length = chosen->size;
    samples.push_back(std::move(sample));
  }
  if (samples.empty()) return Bad(shard, "holds no sample");
  if (input != nullptr) *input = *kind;
  return samples;
}

absl::StatusOr<NpyHeader> ReadShardArrayHeader(const ImageFile& sample, const ReadOptions& options,
                                               size_t max_bytes) {
  std::string bytes;
  if (auto s = ReadImageHead(sample, options, max_bytes, &bytes); !s.ok()) return s;
  long long whole = sample.length;  // NOLINT(google-runtime-int): OpenDataFile's type
  if (sample.offset < 0) {          // a whole file: its size
    auto opened = OpenDataFile(sample.path, options, &whole);
    if (!opened.ok()) return opened.status();
    close(*opened);
  }
  return ReadNpyHeader(DescribeImageFile(sample, options),
                       reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), whole);
}

int64_t SamplesPerRank(const std::vector<int64_t>& per_shard, int world_size) {
  if (world_size < 1 || per_shard.size() < static_cast<size_t>(world_size)) return 0;
  std::vector<int64_t> per_rank(static_cast<size_t>(world_size), 0);
  for (size_t k = 0; k < per_shard.size(); ++k) per_rank[k % per_rank.size()] += per_shard[k];
  return *std::min_element(per_rank.begin(), per_rank.end());
}

absl::StatusOr<ShardSplit> ListShardSplit(const ShardSplitNames& names, const ReadOptions& options,
                                          int threads) {
  // Every shard of one pattern, indexed in parallel; its samples in pattern order, and the
  // shards' names in `expanded` when given. Every shard's input must be the first one's.
  std::optional<ShardInput> input;
  auto index = [&](const std::string& field, const std::string& pattern,
                   std::vector<std::string>* expanded =
                       nullptr) -> absl::StatusOr<std::vector<std::vector<ImageFile>>> {
    auto shards = ExpandBracePattern(pattern);
    if (!shards.ok()) return InField(field, shards.status());
    if (expanded != nullptr) *expanded = *shards;
    std::vector<absl::StatusOr<std::vector<ImageFile>>> listed(shards->size());
    std::vector<ShardInput> inputs(shards->size());
    std::atomic<size_t> next{0};
    auto work = [&] {
      for (size_t k = next++; k < shards->size(); k = next++) {
        listed[k] = ListShardSamples((*shards)[k], options, &inputs[k]);
      }
    };
    std::vector<std::thread> pool;
    const size_t count = std::min(shards->size(), static_cast<size_t>(std::max(1, threads)));
    for (size_t t = 1; t < count; ++t) pool.emplace_back(work);
    work();
    for (auto& t : pool) t.join();
    std::vector<std::vector<ImageFile>> out;
    for (size_t k = 0; k < listed.size(); ++k) {
      if (!listed[k].ok()) return InField(field, listed[k].status());
      if (!input) input = inputs[k];
      if (inputs[k] != *input) {
        return Bad(field,
                   absl::StrCat((*shards)[k], ": its samples hold ", ShardInputName(inputs[k]),
                                ", the first shard's ", ShardInputName(*input)));
      }
      out.push_back(*std::move(listed[k]));
    }
    return out;
  };
  if (names.urls.empty()) return absl::InvalidArgumentError("data.shards.urls: required");
  ShardSplit split;
  auto train = index("data.shards.urls", names.urls, &split.shards);
  if (!train.ok()) return train.status();
  if (!names.val_urls.empty()) {
    auto val = index("data.shards.val_urls", names.val_urls);
    if (!val.ok()) return val.status();
    for (auto& shard : *train) {
      split.train_per_shard.push_back(static_cast<int64_t>(shard.size()));
      for (auto& s : shard) split.train.push_back(std::move(s));
    }
    for (auto& shard : *val) {
      for (auto& s : shard) split.val.push_back(std::move(s));
    }
  } else {
    if (!(names.val_fraction > 0 && names.val_fraction < 1)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "data.shards.val_fraction: must lie between 0 and 1, not ", names.val_fraction));
    }
    const size_t every =
        std::max<size_t>(2, static_cast<size_t>(std::lround(1 / names.val_fraction)));
    size_t position = 0;
    for (auto& shard : *train) {
      int64_t kept = 0;
      for (auto& s : shard) {
        const bool held_out = position++ % every == every - 1;
        (held_out ? split.val : split.train).push_back(std::move(s));
        kept += held_out ? 0 : 1;
      }
      split.train_per_shard.push_back(kept);
    }
    if (split.val.empty()) {
      return Bad("data.shards.urls",
                 absl::StrCat("too few samples (", position, ") to hold out one of every ", every));
    }
  }
  split.input = *input;
  for (const auto* list : {&split.train, &split.val}) {
    for (const ImageFile& f : *list) split.num_classes = std::max(split.num_classes, f.label + 1);
  }
  if (split.num_classes < 2) {
    return Bad("data.shards.urls", "every label is 0: a classifier needs two classes at least");
  }
  return split;
}

}  // namespace stoke::data
