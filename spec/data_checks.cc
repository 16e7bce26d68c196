#include "spec/data_checks.h"

#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "formats/array_set.h"
#include "formats/image_files.h"
#include "formats/image_set.h"
#include "formats/shard_files.h"
#include "formats/token_file.h"
#include "spec/data_paths.h"
#include "spec/job_defaults.h"

namespace stoke::spec {
namespace {

// What an unset field of the data spec will be (the job defaults).
constexpr uint32_t kDefaultFeatures = defaults::kSyntheticFeatures;
constexpr uint32_t kDefaultClasses = defaults::kSyntheticClasses;
constexpr uint64_t kDefaultSamplesPerEpoch = defaults::kSyntheticSamplesPerEpoch;
constexpr uint32_t kDefaultVocab = defaults::kVocabSize;
constexpr uint32_t kDefaultContext = defaults::kContext;

absl::Status Invalid(absl::string_view field, absl::string_view problem) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", problem));
}

// A reader's error already names the file; say which field led there.
absl::Status FromReader(absl::string_view field, const absl::Status& status) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", status.message()));
}

DataFacts SyntheticFacts(const v1::SyntheticDataSpec& s) {
  DataFacts facts;
  facts.source = "data.synthetic";
  facts.train_samples =
      static_cast<int64_t>(s.samples_per_epoch() ? s.samples_per_epoch() : kDefaultSamplesPerEpoch);
  if (s.vocab_size() > 0) {
    facts.kind = DataFacts::Kind::kTokens;
    facts.vocab_size = s.vocab_size();
    facts.sample = {s.context() ? s.context() : kDefaultContext};
    return facts;
  }
  facts.num_classes = s.num_classes() ? s.num_classes() : kDefaultClasses;
  if (s.image_shape_size() > 0) {
    facts.kind = DataFacts::Kind::kImage;
    facts.sample.assign(s.image_shape().begin(), s.image_shape().end());
  } else {
    facts.sample = {s.features() ? s.features() : kDefaultFeatures};
  }
  return facts;
}

// What messages call the data: the field and the path it holds.
std::string Source(absl::string_view field, absl::string_view path) {
  return absl::StrCat(field, " (", path, ")");
}

// The windows TokenDataset (worker/data/dataset.h) cuts from `tokens` tokens: it needs
// room for a shift of up to context - 1 and the target's one extra token.
int64_t Windows(int64_t tokens, int64_t context) { return (tokens - context) / context; }

// How the readers open files: as the worker does, each checked against the data roots at
// the moment it is opened (links followed by hand, nothing followed by the kernel), so
// that a link swapped in after Resolve, or one inside a folder, leads nowhere.
data::ReadOptions Rooted(const DataRoots& roots) {
  data::ReadOptions options;
  options.roots = roots.roots();
  return options;
}

absl::StatusOr<DataFacts> ImageFacts(const std::string& field, const std::string& path,
                                     const std::string& folder, bool cifar,
                                     const DataRoots& roots) {
  // Headers, sizes and labels only: what the coordinator holds in memory stays small
  // whatever the files hold.
  auto splits = cifar ? data::InspectCifar10Folder(folder, Rooted(roots))
                      : data::InspectMnistFolder(folder, Rooted(roots));
  if (!splits.ok()) return FromReader(field, splits.status());
  DataFacts facts;
  facts.kind = DataFacts::Kind::kImage;
  facts.source = Source(field, path);
  facts.sample = {splits->train.channels, splits->train.height, splits->train.width};
  facts.num_classes = splits->train.num_classes;
  facts.train_samples = splits->train.count;
  return facts;
}

absl::StatusOr<std::shared_ptr<const data::TokenFile>> OpenTokens(const std::string& field,
                                                                  const std::string& path,
                                                                  uint32_t vocab,
                                                                  const DataRoots& roots) {
  auto file = data::TokenFile::Open(path, Rooted(roots));
  if (!file.ok()) return FromReader(field, file.status());
  int64_t id = 0;
  const int64_t at = (*file)->FirstOutOfVocabulary(vocab, &id);
  if (at >= 0) {
    // Where, not what: a message must never carry a file's bytes.
    return Invalid(field, absl::StrCat(path, ": the token at position ", at, " (byte offset ",
                                       2 * at, ") is not below data.tokens.vocab_size ", vocab));
  }
  return file;
}

// data.arrays: each named file resolved beneath the roots (a safetensors tensor's name
// kept after its colon), then opened and checked as the worker opens them.
absl::StatusOr<DataFacts> ArrayFacts(const v1::JobSpec& spec, const DataRoots& roots) {
  const v1::ArrayDataSpec& a = spec.data().arrays();
  auto resolve = [&](const std::string& field,
                     const std::string& name) -> absl::StatusOr<std::string> {
    if (name.empty()) return name;
    const auto [path, tensor] = data::SplitArrayName(name);
    auto resolved = roots.Resolve(absl::StrCat("data.arrays.", field), path);
    if (!resolved.ok()) return resolved.status();
    return tensor.empty() ? *resolved : absl::StrCat(*resolved, ":", tensor);
  };
  data::ArrayNames names;
  names.val_fraction = a.has_val_fraction() ? a.val_fraction() : defaults::kValFraction;
  const std::pair<const char*, std::string*> fields[] = {{"inputs", &names.inputs},
                                                         {"targets", &names.targets},
                                                         {"val_inputs", &names.val_inputs},
                                                         {"val_targets", &names.val_targets}};
  const std::string given[] = {a.inputs(), a.targets(), a.val_inputs(), a.val_targets()};
  for (size_t i = 0; i < 4; ++i) {
    if (i < 2 && given[i].empty()) {
      return Invalid(absl::StrCat("data.arrays.", fields[i].first), "required");
    }
    auto resolved = resolve(fields[i].first, given[i]);
    if (!resolved.ok()) return resolved.status();
    *fields[i].second = *resolved;
  }
  auto set = data::OpenArraySet(names, Rooted(roots));
  if (!set.ok()) return absl::InvalidArgumentError(set.status().message());
  // Stoke's own networks take floating (or pixel) inputs and one class index per sample.
  const v1::ModelSpec& model = spec.model();
  const bool built_in = model.has_mlp() || model.has_cnn() || model.has_resnet();
  const data::ArrayDtype input_type = set->inputs->dtype();
  if (built_in &&
      (input_type == data::ArrayDtype::kInt32 || input_type == data::ArrayDtype::kInt64)) {
    return Invalid("data.arrays.inputs",
                   absl::StrCat(a.inputs(), " is ", data::DescribeArray(*set->inputs),
                                ": Stoke's own models take floating inputs or uint8 pixels "
                                "(integer ids need model.python)"));
  }
  if (built_in && set->num_classes > 0 && set->targets->shape().size() != 1) {
    return Invalid("data.arrays.targets",
                   absl::StrCat(a.targets(), " is ", data::DescribeArray(*set->targets),
                                ": Stoke's own classifiers take one class index per sample, [N]"));
  }
  DataFacts facts;
  facts.kind = set->sample.size() == 3 ? DataFacts::Kind::kImage : DataFacts::Kind::kVector;
  facts.source = Source("data.arrays.inputs", a.inputs());
  facts.sample = set->sample;
  facts.num_classes = set->num_classes;
  facts.regression = set->regression;
  facts.train_samples = set->train_rows;
  return facts;
}

// Headers of this many images, spread over the training list, are read at submission.
constexpr size_t kCheckedImages = 64;

// data.images: the files listed (folders walked, manifests read) beneath the roots, and a
// sample of them opened and their headers read as the worker will.
absl::StatusOr<DataFacts> ImageFileFacts(const v1::ImageDataSpec& spec, const DataRoots& roots) {
  data::ImageSplitNames names;
  names.val_fraction = spec.has_val_fraction() ? spec.val_fraction() : defaults::kValFraction;
  const std::pair<const char*, std::pair<const std::string*, std::string*>> fields[] = {
      {"path", {&spec.path(), &names.path}},
      {"manifest", {&spec.manifest(), &names.manifest}},
      {"val_path", {&spec.val_path(), &names.val_path}},
      {"val_manifest", {&spec.val_manifest(), &names.val_manifest}}};
  for (const auto& [field, paths] : fields) {
    if (paths.first->empty()) continue;
    auto resolved = roots.Resolve(absl::StrCat("data.images.", field), *paths.first);
    if (!resolved.ok()) return resolved.status();
    *paths.second = *resolved;
  }
  auto split = data::ListImageSplit(names, Rooted(roots));
  if (!split.ok()) return absl::InvalidArgumentError(split.status().message());
  const std::vector<data::ImageFile>& files = split->train.files;
  if (auto sides = data::CheckImageHeaders(files, kCheckedImages, Rooted(roots)); !sides.ok()) {
    return FromReader("data.images", sides.status());
  }
  DataFacts facts;
  facts.kind = DataFacts::Kind::kImage;
  facts.source = Source(spec.path().empty() ? "data.images.manifest" : "data.images.path",
                        spec.path().empty() ? spec.manifest() : spec.path());
  const int64_t side = spec.size() ? spec.size() : defaults::kImageSize;
  facts.sample = {spec.channels() ? spec.channels() : defaults::kImageChannels, side, side};
  facts.num_classes = split->num_classes;
  facts.train_samples = static_cast<int64_t>(files.size());
  return facts;
}

// data.shards: every shard named resolved beneath the roots and indexed (headers and
// labels, as the worker will), and a sample of images' headers read.
// What the shards' samples feed a model (facts' kind and sample), checked on a sample of
// them as the worker reads them: image headers; array headers, each the first's dtype and
// shape; texts (integer ids) are for a model.python.
absl::Status ShardInputFacts(const v1::JobSpec& spec, const data::ShardSplit& split,
                             const DataRoots& roots, DataFacts* facts) {
  const v1::ShardDataSpec& shards = spec.data().shards();
  const v1::ModelSpec& model = spec.model();
  const bool built_in = model.has_mlp() || model.has_cnn() || model.has_resnet();
  switch (split.input) {
    case data::ShardInput::kImage: {
      if (auto sides = data::CheckImageHeaders(split.train, kCheckedImages, Rooted(roots));
          !sides.ok()) {
        return FromReader("data.shards.urls", sides.status());
      }
      const int64_t side = shards.size() ? shards.size() : defaults::kImageSize;
      facts->kind = DataFacts::Kind::kImage;
      facts->sample = {shards.channels() ? shards.channels() : defaults::kImageChannels, side,
                       side};
      return absl::OkStatus();
    }
    case data::ShardInput::kText:
      if (built_in) {
        return Invalid("data.shards.urls",
                       "its samples are texts (.txt), fed as byte ids: Stoke's own models take "
                       "floating inputs or pixels (embed ids in a model.python)");
      }
      facts->kind = DataFacts::Kind::kVector;
      facts->sample = {shards.text_length() ? shards.text_length() : defaults::kTextLength};
      return absl::OkStatus();
    case data::ShardInput::kArray:
      break;
  }
  auto first = data::ReadShardArrayHeader(split.train[0], Rooted(roots));
  if (!first.ok()) return FromReader("data.shards.urls", first.status());
  const size_t count = std::min(kCheckedImages, split.train.size());
  for (size_t i = 1; i < count; ++i) {
    const data::ImageFile& sample = split.train[i * split.train.size() / count];
    auto header = data::ReadShardArrayHeader(sample, Rooted(roots));
    if (!header.ok()) return FromReader("data.shards.urls", header.status());
    if (header->dtype != first->dtype || header->shape != first->shape) {
      return Invalid(
          "data.shards.urls",
          absl::StrCat(data::DescribeImageFile(sample, Rooted(roots)), " holds ",
                       data::DtypeName(header->dtype), " [", absl::StrJoin(header->shape, ", "),
                       "], the first sample ", data::DtypeName(first->dtype), " [",
                       absl::StrJoin(first->shape, ", "), "]"));
    }
  }
  if (first->shape.empty()) {
    return Invalid("data.shards.urls",
                   absl::StrCat(data::DescribeImageFile(split.train[0], Rooted(roots)),
                                " is a scalar: a sample needs a feature"));
  }
  if (built_in && data::IsInteger(first->dtype) && first->dtype != data::ArrayDtype::kUInt8) {
    return Invalid("data.shards.urls",
                   absl::StrCat("its samples are ", data::DtypeName(first->dtype),
                                " arrays: Stoke's own models take floating inputs or uint8 "
                                "pixels (integer ids need model.python)"));
  }
  const data::SampleLayout layout = data::LayoutOfSample(first->dtype, first->shape);
  facts->kind = layout.images || layout.sample.size() == 3 ? DataFacts::Kind::kImage
                                                           : DataFacts::Kind::kVector;
  facts->sample = layout.sample;
  return absl::OkStatus();
}

absl::StatusOr<DataFacts> ShardFacts(const v1::JobSpec& spec, const DataRoots& roots) {
  const v1::ShardDataSpec& shards = spec.data().shards();
  data::ShardSplitNames names;
  names.urls = shards.urls();
  names.val_urls = shards.val_urls();
  names.val_fraction = shards.has_val_fraction() ? shards.val_fraction() : defaults::kValFraction;
  for (const auto& [field, pattern] : {std::pair{"data.shards.urls", &names.urls},
                                       std::pair{"data.shards.val_urls", &names.val_urls}}) {
    if (pattern->empty()) continue;
    auto expanded = data::ExpandBracePattern(*pattern);
    if (!expanded.ok()) return FromReader(field, expanded.status());
    for (const std::string& shard : *expanded) {
      if (auto resolved = roots.Resolve(field, shard); !resolved.ok()) return resolved.status();
    }
  }
  auto split = data::ListShardSplit(names, Rooted(roots));
  if (!split.ok()) return absl::InvalidArgumentError(split.status().message());
  DataFacts facts;
  if (auto s = ShardInputFacts(spec, *split, roots, &facts); !s.ok()) return s;
  const uint32_t ranks = std::max<uint32_t>(1, spec.resources().gpus());
  const int64_t per_rank = data::SamplesPerRank(split->train_per_shard, static_cast<int>(ranks));
  if (per_rank == 0) {
    return Invalid("data.shards.urls",
                   absl::StrCat(split->shards.size(), " shard(s) for ", ranks,
                                " ranks (resources.gpus); each rank reads shards of its own"));
  }
  facts.source = Source("data.shards.urls", shards.urls());
  facts.num_classes = split->num_classes;
  // What the ranks read together: each as many samples as the one with fewest.
  facts.train_samples = per_rank * ranks;
  return facts;
}

}  // namespace

DataRoots::DataRoots(const std::vector<std::string>& roots) {
  for (const auto& root : roots) {
    char resolved[PATH_MAX];
    if (realpath(root.c_str(), resolved)) roots_.push_back(resolved);
  }
}

absl::StatusOr<std::string> DataRoots::Resolve(const std::string& field,
                                               const std::string& path) const {
  if (path.empty()) return Invalid(field, "required");
  // The system calls below would stop at a NUL and check a path other than the one stored.
  if (path.find('\0') != std::string::npos) return Invalid(field, "must not contain a NUL byte");
  if (path[0] != '/') {
    return Invalid(field,
                   absl::StrCat(path, ": must be an absolute path (the coordinator reads it)"));
  }
  char resolved[PATH_MAX];
  if (!realpath(path.c_str(), resolved)) {
    return Invalid(field, absl::StrCat(path, ": ", std::strerror(errno)));
  }
  const std::string canonical = resolved;
  for (const auto& root : roots_) {
    if (canonical == root || canonical.rfind(root + (root == "/" ? "" : "/"), 0) == 0) {
      if (access(canonical.c_str(), R_OK) != 0) {
        return Invalid(field, absl::StrCat(path, ": not readable: ", std::strerror(errno)));
      }
      return canonical;
    }
  }
  return Invalid(field, absl::StrCat(path, " is outside the coordinator's data roots (",
                                     roots_.empty() ? "none" : absl::StrJoin(roots_, ", "),
                                     "); start stoke-coordinator with --data-root to allow it"));
}

absl::StatusOr<std::string> DataRoots::FindBeneathRoots(const std::string& field,
                                                        const std::string& relative) const {
  const std::string written = absl::StrCat(spec::kDataRootPrefix, relative);
  if (relative.empty() || relative[0] == '/') {
    return Invalid(field, absl::StrCat(written, ": a path relative to the data roots"));
  }
  for (absl::string_view part : absl::StrSplit(relative, '/')) {
    if (part == "..") return Invalid(field, absl::StrCat(written, ": must not climb with .."));
  }
  // What must exist: a pattern's folder, a tensor's file, else the path itself.
  std::string must_exist = relative;
  if (const size_t brace = must_exist.find('{'); brace != std::string::npos) {
    const size_t slash = must_exist.rfind('/', brace);
    must_exist = slash == std::string::npos ? "." : must_exist.substr(0, slash);
  } else if (const size_t tensor = must_exist.find(".safetensors:"); tensor != std::string::npos) {
    must_exist = must_exist.substr(0, tensor + std::string(".safetensors").size());
  }
  for (const auto& root : roots_) {
    struct stat st;
    if (stat(absl::StrCat(root, "/", must_exist).c_str(), &st) == 0) {
      return absl::StrCat(root, "/", relative);
    }
  }
  return Invalid(field, absl::StrCat(written, " is in none of the coordinator's data roots (",
                                     roots_.empty() ? "none" : absl::StrJoin(roots_, ", "), ")"));
}

absl::Status ResolveDataRootPaths(v1::JobSpec& spec, const DataRoots& roots) {
  absl::Status status;
  spec::ForEachPath(spec, [&](const std::string& field, std::string* path) {
    if (!status.ok() || !spec::IsDataRootPath(*path)) return;
    auto found =
        roots.FindBeneathRoots(field, path->substr(std::string(spec::kDataRootPrefix).size()));
    if (found.ok()) {
      *path = *std::move(found);
    } else {
      status = found.status();
    }
  });
  return status;
}

absl::StatusOr<DataFacts> InspectData(const v1::JobSpec& spec, const DataRoots& roots) {
  if (spec.model().has_torchscript()) {
    auto path = roots.Resolve("model.torchscript.path", spec.model().torchscript().path());
    if (!path.ok()) return path.status();
  }
  const v1::DataSpec& data = spec.data();
  switch (data.kind_case()) {
    case v1::DataSpec::kSynthetic:
      return SyntheticFacts(data.synthetic());
    case v1::DataSpec::kMnist: {
      auto folder = roots.Resolve("data.mnist.path", data.mnist().path());
      if (!folder.ok()) return folder.status();
      return ImageFacts("data.mnist.path", data.mnist().path(), *folder, /*cifar=*/false, roots);
    }
    case v1::DataSpec::kCifar10: {
      auto folder = roots.Resolve("data.cifar10.path", data.cifar10().path());
      if (!folder.ok()) return folder.status();
      return ImageFacts("data.cifar10.path", data.cifar10().path(), *folder, /*cifar=*/true, roots);
    }
    case v1::DataSpec::kTokens: {
      const auto& t = data.tokens();
      const uint32_t vocab = t.vocab_size() ? t.vocab_size() : kDefaultVocab;
      const int64_t context = t.context() ? t.context() : kDefaultContext;
      auto train_path = roots.Resolve("data.tokens.train_path", t.train_path());
      if (!train_path.ok()) return train_path.status();
      auto train = OpenTokens("data.tokens.train_path", *train_path, vocab, roots);
      if (!train.ok()) return train.status();
      int64_t train_tokens = (*train)->size();
      if (!t.val_path().empty()) {
        auto val_path = roots.Resolve("data.tokens.val_path", t.val_path());
        if (!val_path.ok()) return val_path.status();
        auto val = OpenTokens("data.tokens.val_path", *val_path, vocab, roots);
        if (!val.ok()) return val.status();
        if (Windows((*val)->size(), context) < 1) {
          return Invalid("data.tokens.val_path",
                         absl::StrCat(*val_path, ": ", (*val)->size(),
                                      " tokens are too few for one window of context ", context,
                                      " (it takes ", 2 * context, ")"));
        }
      } else {
        const int64_t held_out = train_tokens / 10;  // the worker holds out the last tenth
        if (Windows(held_out, context) < 1) {
          return Invalid(
              "data.tokens.train_path",
              absl::StrCat(*train_path, ": its last tenth, held out for evaluation, is ", held_out,
                           " tokens: too few for one window of context ", context, " (it takes ",
                           2 * context, "); set data.tokens.val_path or use more data"));
        }
        train_tokens -= held_out;
      }
      DataFacts facts;
      facts.kind = DataFacts::Kind::kTokens;
      facts.source = Source("data.tokens.train_path", t.train_path());
      facts.sample = {context};
      facts.vocab_size = vocab;
      facts.train_samples = Windows(train_tokens, context);
      if (facts.train_samples < 1) {
        return Invalid("data.tokens.train_path",
                       absl::StrCat(*train_path, ": ", train_tokens,
                                    " training tokens are too few for one window of context ",
                                    context, " (data.tokens.context)"));
      }
      return facts;
    }
    case v1::DataSpec::kArrays:
      return ArrayFacts(spec, roots);
    case v1::DataSpec::kImages:
      return ImageFileFacts(data.images(), roots);
    case v1::DataSpec::kShards:
      return ShardFacts(spec, roots);
    default:
      return Invalid(
          "data", "required: set one of synthetic, mnist, cifar10, tokens, arrays, images, shards");
  }
}

}  // namespace stoke::spec
