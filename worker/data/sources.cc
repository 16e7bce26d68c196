#include "worker/data/sources.h"

#include <torch/torch.h>

#include <algorithm>
#include <random>
#include <stdexcept>
#include <thread>

#include "formats/array_set.h"
#include "formats/image_files.h"
#include "formats/image_set.h"
#include "formats/shard_files.h"
#include "formats/token_file.h"
#include "worker/common/status_error.h"
#include "worker/data/image_file_dataset.h"
#include "worker/data/loader.h"
#include "worker/data/shard_member_dataset.h"
#include "worker/data/shard_order.h"
#include "worker/data/synthetic.h"

namespace stoke::worker {
namespace {

// Batches drawn for evaluation on synthetic data when the spec does not say.
constexpr int64_t kSyntheticEvalBatches = 10;

// `decodes`: the loader threads decode images, work that scales with every core a GPU
// host has; otherwise they copy bytes, for which eight are plenty.
BatchLoader::Options LoaderOptions(const TrainTask& task, torch::Device device, int64_t start_batch,
                                   bool decodes = false) {
  BatchLoader::Options o;
  o.batch_size = task.training.batch_size;
  // By default one loader thread per core, at most 8; a CPU worker's loaders compete with
  // its compute threads, so they get no more than those.
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int budget =
      device.is_cuda() ? cores : std::max(1, static_cast<int>(torch::get_num_threads()));
  o.threads = task.data.loader.threads > 0 ? task.data.loader.threads
                                           : (decodes ? budget : std::min(budget, 8));
  o.prefetch = std::max(1, task.data.loader.prefetch);
  o.pin_memory = task.data.loader.pin_memory;
  o.shuffle = task.data.loader.shuffle;
  o.seed = task.training.seed;
  o.rank = task.rank;
  o.world_size = task.world_size;
  o.start_batch = start_batch;
  o.device = device;
  return o;
}

// The pipeline over a training set (batched by the loader) and a held-out one, both
// prepared on the device by `prep`.
DataPipeline PipelineOf(std::shared_ptr<const Dataset> train, std::shared_ptr<const Dataset> val,
                        const BatchPrep& prep, const TrainTask& task, torch::Device device,
                        const BatchLoader::Options& loader) {
  DataPipeline pipeline;
  pipeline.eval = std::make_unique<DatasetEval>(std::move(val), prep, task.training.batch_size,
                                                task.eval.batches, device);
  pipeline.train = std::make_unique<BatchLoader>(std::move(train), prep, loader);
  return pipeline;
}

DataPipeline OpenImages(const TrainTask& task, data::ImageSplits splits, torch::Device device,
                        int64_t start_batch) {
  auto train = std::make_shared<ImageDataset>(std::move(splits.train));
  auto test = std::make_shared<ImageDataset>(std::move(splits.test));
  // Both splits are normalized with the training split's statistics.
  BatchPrep prep =
      BatchPrep::ForImages(task.data.augment, train->ChannelMean(), train->ChannelStd(), device);
  return PipelineOf(train, test, prep, task, device, LoaderOptions(task, device, start_batch));
}

// Every token id below the vocabulary, or std::invalid_argument naming the first that is
// not (by its position: the id itself is the file's content, kept out of messages). In
// pieces, so that a cancel is seen within a fraction of a second on a large file.
void CheckVocabulary(const data::TokenFile& file, int64_t vocab_size,
                     const data::ReadOptions& options) {
  constexpr int64_t kPiece = int64_t{1} << 24;
  for (int64_t begin = 0; begin < file.size(); begin += kPiece) {
    if (options.cancelled()) ThrowIfError(data::ReadCancelled(file.path()));
    int64_t id = 0;
    const int64_t at = file.FirstOutOfVocabulary(vocab_size, &id, begin, begin + kPiece);
    if (at >= 0) {
      throw std::invalid_argument(file.path() + ": token " + std::to_string(at) +
                                  " is not below data.tokens.vocab_size " +
                                  std::to_string(vocab_size));
    }
  }
}

DataPipeline OpenTokens(const TrainTask& task, const TokenDataConfig& config, torch::Device device,
                        int64_t start_batch, const data::ReadOptions& options) {
  auto train_file = ValueOrThrow(data::TokenFile::Open(config.train_path, options));
  std::shared_ptr<const data::TokenFile> val_file = train_file;
  int64_t train_end = train_file->size();
  int64_t val_begin = 0;
  if (config.val_path.empty()) {
    // Hold out the last tenth of the training file.
    train_end = train_file->size() - train_file->size() / 10;
    val_begin = train_end;
  } else {
    val_file = ValueOrThrow(data::TokenFile::Open(config.val_path, options));
  }
  CheckVocabulary(*train_file, config.vocab_size, options);
  if (val_file != train_file) CheckVocabulary(*val_file, config.vocab_size, options);
  auto train = std::make_shared<TokenDataset>(train_file, 0, train_end, config.context,
                                              config.vocab_size, task.training.seed);
  auto val = std::make_shared<TokenDataset>(val_file, val_begin, val_file->size(), config.context,
                                            config.vocab_size, task.training.seed);
  return PipelineOf(train, val, BatchPrep::ForTokens(), task, device,
                    LoaderOptions(task, device, start_batch));
}

// Image statistics come from this many training samples at most.
constexpr int64_t kImageStatisticsSamples = 4096;

DataPipeline OpenArrays(const TrainTask& task, const ArrayDataConfig& config, torch::Device device,
                        int64_t start_batch, const data::ReadOptions& options) {
  const data::ArraySet set = ValueOrThrow(data::OpenArraySet(
      {config.inputs, config.targets, config.val_inputs, config.val_targets, config.val_fraction},
      options));
  DataShape shape;
  shape.kind =
      set.images || set.sample.size() == 3 ? DataShape::Kind::kImage : DataShape::Kind::kVector;
  shape.sample = set.sample;
  shape.num_classes = set.num_classes;
  shape.regression = set.regression;
  auto train = std::make_shared<ArrayDataset>(set.inputs, set.targets, 0, set.train_rows, shape,
                                              set.channels_last);
  auto val = std::make_shared<ArrayDataset>(set.val_inputs, set.val_targets, set.val_begin,
                                            set.val_end, shape, set.channels_last);
  BatchPrep prep = BatchPrep::ForArrays();
  if (set.images) {
    // Both splits are normalized with the training split's statistics.
    std::vector<double> mean, std;
    train->ImageStatistics(kImageStatisticsSamples, &mean, &std);
    prep = BatchPrep::ForImages(task.data.augment, mean, std, device);
  }
  return PipelineOf(train, val, prep, task, device, LoaderOptions(task, device, start_batch));
}

// Images whose statistics (for normalization) are measured: this many, spread over the set.
constexpr int64_t kImageFileStatisticsSamples = 256;

// How image files are cropped and sized (data.images' and data.shards' fields).
struct ImageFileShape {
  int64_t size;
  int channels;
  double min_crop_area;
};

// Training and held-out images read from their files (whole, or members of shards), with
// the loader's order given.
DataPipeline OpenImageFileSets(const TrainTask& task, std::vector<data::ImageFile> train_files,
                               std::vector<data::ImageFile> val_files, int64_t num_classes,
                               const ImageFileShape& shape, torch::Device device,
                               const BatchLoader::Options& loader,
                               const data::ReadOptions& options) {
  // Held-out images in a fixed random order: a partial evaluation (eval.batches) of a list
  // sorted by class would see the first classes only.
  std::shuffle(val_files.begin(), val_files.end(), std::mt19937_64(task.training.seed));
  ImageFileDataset::Options o;
  o.size = shape.size;
  o.channels = shape.channels;
  o.min_crop_area = shape.min_crop_area;
  o.seed = task.training.seed;
  o.max_bad_fraction = task.data.max_bad_fraction;
  o.files = options;
  auto train = std::make_shared<ImageFileDataset>(std::move(train_files), num_classes, o);
  o.train = false;
  auto val = std::make_shared<ImageFileDataset>(std::move(val_files), num_classes, o);
  std::vector<double> mean, std;
  train->Statistics(kImageFileStatisticsSamples, &mean, &std);
  BatchPrep prep = BatchPrep::ForImages(task.data.augment, mean, std, device);
  return PipelineOf(train, val, prep, task, device, loader);
}

DataPipeline OpenImageFiles(const TrainTask& task, const ImageDataConfig& config,
                            torch::Device device, int64_t start_batch,
                            const data::ReadOptions& options) {
  data::ImageSplit split = ValueOrThrow(data::ListImageSplit(
      {config.path, config.manifest, config.val_path, config.val_manifest, config.val_fraction},
      options));
  return OpenImageFileSets(task, std::move(split.train.files), std::move(split.val.files),
                           split.num_classes, {config.size, config.channels, config.min_crop_area},
                           device, LoaderOptions(task, device, start_batch, /*decodes=*/true),
                           options);
}

// Shards whose samples are arrays or texts: read from their members as stored.
DataPipeline OpenShardMembers(const TrainTask& task, const ShardDataConfig& config,
                              data::ShardSplit split, torch::Device device,
                              const BatchLoader::Options& loader,
                              const data::ReadOptions& options) {
  ShardMemberDataset::Options o;
  o.input = split.input;
  o.text_length = config.text_length;
  o.seed = task.training.seed;
  o.max_bad_fraction = task.data.max_bad_fraction;
  o.files = options;
  if (split.input == data::ShardInput::kArray) {
    const data::NpyHeader first = ValueOrThrow(data::ReadShardArrayHeader(split.train[0], options));
    o.dtype = first.dtype;
    o.stored_shape = first.shape;
  }
  std::shuffle(split.val.begin(), split.val.end(), std::mt19937_64(task.training.seed));
  auto train = std::make_shared<ShardMemberDataset>(std::move(split.train), split.num_classes, o);
  auto val = std::make_shared<ShardMemberDataset>(std::move(split.val), split.num_classes, o);
  BatchPrep prep = BatchPrep::ForArrays();
  if (train->images()) {
    std::vector<double> mean, std;
    train->ImageStatistics(kImageFileStatisticsSamples, &mean, &std);
    prep = BatchPrep::ForImages(task.data.augment, mean, std, device);
  }
  return PipelineOf(train, val, prep, task, device, loader);
}

DataPipeline OpenShards(const TrainTask& task, const ShardDataConfig& config, torch::Device device,
                        int64_t start_batch, const data::ReadOptions& options) {
  BatchLoader::Options loader = LoaderOptions(task, device, start_batch, /*decodes=*/true);
  data::ShardSplit split = ValueOrThrow(data::ListShardSplit(
      {config.urls, config.val_urls, config.val_fraction}, options, loader.threads));
  ShardStream stream;
  stream.shard_sizes = split.train_per_shard;
  stream.rank = task.rank;
  stream.world_size = task.world_size;
  stream.seed = task.training.seed;
  stream.shuffle_buffer = config.shuffle_buffer;
  stream.shuffle = task.data.loader.shuffle;
  loader.order_per_rank = ShardSamplesPerRank(stream);
  loader.order = ShardRankOrder(std::move(stream));
  if (split.input != data::ShardInput::kImage) {
    return OpenShardMembers(task, config, std::move(split), device, loader, options);
  }
  return OpenImageFileSets(task, std::move(split.train), std::move(split.val), split.num_classes,
                           {config.size, config.channels, config.min_crop_area}, device, loader,
                           options);
}

}  // namespace

DataPipeline OpenData(const TrainTask& task, torch::Device device, int64_t start_batch,
                      const std::atomic<bool>* cancel) {
  const auto& source = task.data.source;
  data::ReadOptions files;
  files.roots = task.data_roots;
  files.cancel = cancel;
  if (const auto* given = std::get_if<SyntheticDataConfig>(&source)) {
    SyntheticDataConfig shaped = *given;
    // A TorchScript or Python model says what it takes; synthetic data follows.
    auto follow = [&shaped](const auto& user) {
      if (!user.input_shape.empty()) shaped.input_shape = user.input_shape;
      if (user.loss == LossKind::kMse) shaped.regression_shape = user.target_shape;
      if (user.num_classes > 0) shaped.num_classes = user.num_classes;
    };
    if (const auto* ts = std::get_if<TorchScriptConfig>(&task.model)) follow(*ts);
    if (const auto* py = std::get_if<PythonConfig>(&task.model)) follow(*py);
    const SyntheticDataConfig* synthetic = &shaped;
    DataPipeline pipeline;
    // The same rule (seeded by the job's seed) labels training and held-out samples;
    // the held-out ones are drawn once, before training starts.
    auto train = std::make_unique<SyntheticSource>(*synthetic, device, task.training.batch_size,
                                                   task.training.seed, task.world_size);
    pipeline.eval = std::make_unique<SyntheticEval>(
        *train, task.eval.batches > 0 ? task.eval.batches : kSyntheticEvalBatches);
    pipeline.train = std::move(train);
    return pipeline;
  }
  if (const auto* mnist = std::get_if<MnistDataConfig>(&source)) {
    return OpenImages(task, ValueOrThrow(data::ReadMnistFolder(mnist->path, files)), device,
                      start_batch);
  }
  if (const auto* cifar = std::get_if<Cifar10DataConfig>(&source)) {
    return OpenImages(task, ValueOrThrow(data::ReadCifar10Folder(cifar->path, files)), device,
                      start_batch);
  }
  if (const auto* images = std::get_if<ImageDataConfig>(&source)) {
    return OpenImageFiles(task, *images, device, start_batch, files);
  }
  if (const auto* shards = std::get_if<ShardDataConfig>(&source)) {
    return OpenShards(task, *shards, device, start_batch, files);
  }
  if (const auto* arrays = std::get_if<ArrayDataConfig>(&source)) {
    return OpenArrays(task, *arrays, device, start_batch, files);
  }
  return OpenTokens(task, std::get<TokenDataConfig>(source), device, start_batch, files);
}

}  // namespace stoke::worker
