// The worker's data pipeline on CPU: the epoch sampler, the data sets, the loader threads,
// device-side preparation, evaluation sets, the file format readers, and OpenData end to
// end on files written into a temp dir.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <future>
#include <memory>
#include <numeric>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "files/posix_files.h"
#include "formats/idx_file.h"
#include "formats/image_set.h"
#include "formats/token_file.h"
#include "tests/support/data_files.h"
#include "tests/support/temp_dir.h"
#include "worker/common/status_error.h"
#include "worker/data/batch_prep.h"
#include "worker/data/dataset.h"
#include "worker/data/epoch_sampler.h"
#include "worker/data/eval_set.h"
#include "worker/data/loader.h"
#include "worker/data/sources.h"
#include "worker/data/synthetic.h"
#include "worker/ops/image_prep.h"

namespace stoke::worker {
namespace {

using ::stoke::testing::TempDir;

// For EXPECT_PRED2, which prints both strings when it fails.
bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

std::vector<int64_t> ToVector(const torch::Tensor& t) {
  torch::Tensor c = t.to(torch::kLong).contiguous();
  return std::vector<int64_t>(c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel());
}

// Runs `f` on a thread of its own; false when it has not returned within `limit` (the
// thread is then abandoned, so a hang fails the test instead of stalling the suite).
bool FinishesWithin(std::chrono::milliseconds limit, std::function<void()> f) {
  auto done = std::make_shared<std::promise<void>>();
  std::future<void> finished = done->get_future();
  std::thread([f = std::move(f), done] {
    f();
    done->set_value();
  }).detach();
  return finished.wait_for(limit) == std::future_status::ready;
}

// ---------------------------------------------------------------------------------------
// EpochSampler

// The sample indices each rank takes in one epoch, batch after batch.
std::vector<std::vector<int64_t>> EpochOnEachRank(int64_t size, int64_t batch, int world,
                                                  uint64_t seed, int64_t epoch,
                                                  bool shuffle = true) {
  std::vector<std::vector<int64_t>> ranks;
  for (int rank = 0; rank < world; ++rank) {
    EpochSampler sampler(size, batch, seed, rank, world, shuffle);
    std::vector<int64_t> seen;
    for (int64_t b = 0; b < sampler.batches_per_epoch(); ++b) {
      std::vector<int64_t> indices = sampler.Batch(epoch * sampler.batches_per_epoch() + b);
      EXPECT_EQ(static_cast<int64_t>(indices.size()), batch);
      seen.insert(seen.end(), indices.begin(), indices.end());
    }
    ranks.push_back(seen);
  }
  return ranks;
}

struct SplitCase {
  int64_t size;
  int64_t batch;
  int world;
};

TEST(EpochSampler, EverySampleIsSeenAtMostOncePerEpochAcrossRanks) {
  for (const SplitCase& c : {SplitCase{100, 8, 1}, SplitCase{100, 8, 2}, SplitCase{100, 8, 3},
                             SplitCase{101, 5, 3}, SplitCase{64, 8, 2}, SplitCase{7, 7, 1}}) {
    SCOPED_TRACE(::testing::Message()
                 << "size " << c.size << ", batch " << c.batch << ", world " << c.world);
    // Each rank gets size / world samples, of which it uses whole batches only.
    const int64_t per_rank_used = (c.size / c.world) / c.batch * c.batch;
    const int64_t left_out = c.size - per_rank_used * c.world;
    for (int64_t epoch = 0; epoch < 3; ++epoch) {
      std::set<int64_t> all;
      for (const std::vector<int64_t>& rank : EpochOnEachRank(c.size, c.batch, c.world, 7, epoch)) {
        EXPECT_EQ(static_cast<int64_t>(rank.size()), per_rank_used);
        for (int64_t index : rank) {
          EXPECT_GE(index, 0);
          EXPECT_LT(index, c.size);
          EXPECT_TRUE(all.insert(index).second) << "sample " << index << " seen twice";
        }
      }
      EXPECT_EQ(static_cast<int64_t>(all.size()), c.size - left_out);
    }
  }
}

TEST(EpochSampler, TheLeftOutSamplesChangeFromEpochToEpoch) {
  // 100 samples in batches of 8 leave 4 out of every epoch; no sample may be left out of
  // all of them.
  std::set<int64_t> ever;
  for (int64_t epoch = 0; epoch < 30; ++epoch) {
    const std::vector<int64_t> seen = EpochOnEachRank(100, 8, 1, 3, epoch)[0];
    ever.insert(seen.begin(), seen.end());
  }
  EXPECT_EQ(ever.size(), 100u);
}

TEST(EpochSampler, OrderChangesEachEpochAndRepeatsForTheSameSeed) {
  const auto epoch0 = EpochOnEachRank(100, 10, 2, 42, 0);
  const auto epoch1 = EpochOnEachRank(100, 10, 2, 42, 1);
  EXPECT_NE(epoch0, epoch1);
  // A second set of samplers with the same seed: a resumed or restarted job.
  EXPECT_EQ(EpochOnEachRank(100, 10, 2, 42, 0), epoch0);
  EXPECT_EQ(EpochOnEachRank(100, 10, 2, 42, 1), epoch1);
  EXPECT_NE(EpochOnEachRank(100, 10, 2, 43, 0), epoch0);
}

TEST(EpochSampler, SamplersUsedInTurnOnOneThreadDoNotMixTheirOrders) {
  EpochSampler a(100, 10, 1, 0, 1, true);
  EpochSampler b(100, 10, 2, 0, 1, true);
  const std::vector<int64_t> a_batch3 = EpochSampler(100, 10, 1, 0, 1, true).Batch(3);
  const std::vector<int64_t> b_batch4 = EpochSampler(100, 10, 2, 0, 1, true).Batch(4);
  a.Batch(2);
  b.Batch(3);
  EXPECT_EQ(a.Batch(3), a_batch3);
  EXPECT_EQ(b.Batch(4), b_batch4);
}

TEST(EpochSampler, WithoutShuffleBatchesFollowTheDataOrder) {
  EpochSampler sampler(100, 8, 5, 0, 1, /*shuffle=*/false);
  for (int64_t epoch = 0; epoch < 2; ++epoch) {
    for (int64_t b = 0; b < sampler.batches_per_epoch(); ++b) {
      std::vector<int64_t> expected(8);
      std::iota(expected.begin(), expected.end(), b * 8);
      EXPECT_EQ(sampler.Batch(epoch * sampler.batches_per_epoch() + b), expected);
    }
  }
  // Two ranks take turns through the same order.
  const auto ranks = EpochOnEachRank(20, 5, 2, 5, 0, /*shuffle=*/false);
  EXPECT_EQ(ranks[0], (std::vector<int64_t>{0, 2, 4, 6, 8, 10, 12, 14, 16, 18}));
  EXPECT_EQ(ranks[1], (std::vector<int64_t>{1, 3, 5, 7, 9, 11, 13, 15, 17, 19}));
}

TEST(EpochSampler, ABatchLargerThanEachRanksShareIsRefusedNamingTheField) {
  EXPECT_THROW(EpochSampler(100, 128, 1, 0, 1, true), std::invalid_argument);
  try {
    EpochSampler(100, 51, 1, 0, 2, true);  // 50 samples per rank
    ADD_FAILURE() << "a batch of 51 from 50 samples was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_PRED2(Contains, e.what(), "training.batch_size");
    EXPECT_PRED2(Contains, e.what(), "51");
  }
  EXPECT_EQ(EpochSampler(100, 50, 1, 0, 2, true).batches_per_epoch(), 1);
}

// ---------------------------------------------------------------------------------------
// ImageDataset and BatchLoader

constexpr int64_t kImages = 100;
constexpr int64_t kBatch = 8;

// 100 images 1x4x4 whose first pixel is their index, labels index % 10.
data::ImageSet IndexedImages() { return testing::PatternImages(kImages, 4, 4, 10); }

// Pixels scaled to [0, 1], nothing else: the batch contents identify the samples.
BatchPrep ScaleOnly() {
  AugmentConfig augment;
  augment.normalize = false;
  return BatchPrep::ForImages(augment, {0.0}, {1.0}, torch::kCPU);
}

// The index of each image of a ScaleOnly() batch of IndexedImages().
std::vector<int64_t> SampleIds(const Batch& batch) {
  return ToVector(batch.inputs.select(1, 0).select(1, 0).select(1, 0).mul(255).round());
}

torch::Tensor AllPixels(const data::ImageSet& set) {
  return torch::from_blob(const_cast<uint8_t*>(set.pixels.data()),
                          {set.count, set.channels, set.height, set.width}, torch::kUInt8);
}

torch::Tensor ExpectedImages(const data::ImageSet& set, const std::vector<int64_t>& ids) {
  return AllPixels(set).index_select(0, torch::tensor(ids)).to(torch::kFloat32).div_(255.0);
}

BatchLoader::Options LoaderOptions(int threads, int64_t start_batch = 0) {
  BatchLoader::Options o;
  o.batch_size = kBatch;
  o.threads = threads;
  o.prefetch = 2;
  o.seed = 11;
  o.start_batch = start_batch;
  o.device = torch::kCPU;
  return o;
}

std::vector<Batch> Take(BatchSource& source, int64_t n) {
  std::vector<Batch> batches;
  for (int64_t i = 0; i < n; ++i) batches.push_back(source.Next());
  return batches;
}

void ExpectSameBatches(const std::vector<Batch>& a, const std::vector<Batch>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(torch::equal(a[i].inputs, b[i].inputs)) << "batch " << i;
    EXPECT_TRUE(torch::equal(a[i].targets, b[i].targets)) << "batch " << i;
  }
}

TEST(ImageDataset, ChannelStatisticsArePerChannelInUnitRange) {
  data::ImageSet set;
  set.count = 2;
  set.channels = 2;
  set.height = 1;
  set.width = 2;
  // Channel 0 holds 0 and 255 equally often, channel 1 is 51 everywhere.
  set.pixels = {0, 255, 51, 51, 255, 0, 51, 51};
  set.labels = {0, 1};
  set.num_classes = 2;
  ImageDataset dataset(set);
  ASSERT_EQ(dataset.ChannelMean().size(), 2u);
  EXPECT_NEAR(dataset.ChannelMean()[0], 0.5, 1e-9);
  EXPECT_NEAR(dataset.ChannelStd()[0], 0.5, 1e-9);
  EXPECT_NEAR(dataset.ChannelMean()[1], 0.2, 1e-9);
  EXPECT_GT(dataset.ChannelStd()[1], 0.0);  // a constant channel must not divide by zero
  EXPECT_LT(dataset.ChannelStd()[1], 1e-3);
  const DataShape shape = dataset.Shape();
  EXPECT_EQ(shape.kind, DataShape::Kind::kImage);
  EXPECT_EQ(shape.sample, (std::vector<int64_t>{2, 1, 2}));
  EXPECT_EQ(shape.num_classes, 2);
}

TEST(BatchLoader, BatchesFollowTheSamplersOrderWithTheirImagesAndLabels) {
  const data::ImageSet set = IndexedImages();
  BatchLoader loader(std::make_shared<ImageDataset>(set), ScaleOnly(), LoaderOptions(2));
  ASSERT_EQ(loader.BatchesPerEpoch(), kImages / kBatch);
  // Into the second epoch, to cross the boundary.
  for (int64_t b = 0; b < loader.BatchesPerEpoch() + 3; ++b) {
    SCOPED_TRACE(::testing::Message() << "batch " << b);
    const Batch batch = loader.Next();
    const std::vector<int64_t> ids = loader.sampler().Batch(b);
    EXPECT_EQ(batch.inputs.scalar_type(), torch::kFloat32);
    EXPECT_EQ(batch.inputs.sizes().vec(), (std::vector<int64_t>{kBatch, 1, 4, 4}));
    EXPECT_EQ(batch.targets.scalar_type(), torch::kInt64);
    EXPECT_EQ(SampleIds(batch), ids);
    EXPECT_TRUE(torch::equal(batch.inputs, ExpectedImages(set, ids)));
    std::vector<int64_t> labels;
    for (int64_t id : ids) labels.push_back(set.labels[static_cast<size_t>(id)]);
    EXPECT_EQ(ToVector(batch.targets), labels);
  }
}

TEST(BatchLoader, EachSampleIsSeenOncePerEpoch) {
  BatchLoader loader(std::make_shared<ImageDataset>(IndexedImages()), ScaleOnly(),
                     LoaderOptions(3));
  for (int epoch = 0; epoch < 2; ++epoch) {
    std::set<int64_t> seen;
    for (const Batch& batch : Take(loader, loader.BatchesPerEpoch())) {
      for (int64_t id : SampleIds(batch)) {
        EXPECT_TRUE(seen.insert(id).second) << "sample " << id << " twice in epoch " << epoch;
      }
    }
    EXPECT_EQ(static_cast<int64_t>(seen.size()), kImages / kBatch * kBatch);
  }
}

TEST(BatchLoader, TwoRanksTogetherSeeEachSampleOncePerEpoch) {
  auto dataset = std::make_shared<ImageDataset>(IndexedImages());
  std::set<int64_t> seen;
  for (int rank = 0; rank < 2; ++rank) {
    BatchLoader::Options options = LoaderOptions(2);
    options.rank = rank;
    options.world_size = 2;
    BatchLoader loader(dataset, ScaleOnly(), options);
    ASSERT_EQ(loader.BatchesPerEpoch(), kImages / 2 / kBatch);
    for (const Batch& batch : Take(loader, loader.BatchesPerEpoch())) {
      for (int64_t id : SampleIds(batch)) {
        EXPECT_TRUE(seen.insert(id).second) << "sample " << id << " on both ranks or twice";
      }
    }
  }
  EXPECT_EQ(static_cast<int64_t>(seen.size()), 2 * (kImages / 2 / kBatch * kBatch));
}

TEST(BatchLoader, SeveralThreadsGiveTheSameBatchesAsOne) {
  auto dataset = std::make_shared<ImageDataset>(IndexedImages());
  BatchLoader one(dataset, ScaleOnly(), LoaderOptions(1));
  BatchLoader four(dataset, ScaleOnly(), LoaderOptions(4));
  ExpectSameBatches(Take(one, 30), Take(four, 30));
}

TEST(BatchLoader, StartBatchResumesWithTheBatchesAFreshLoaderWouldProduce) {
  auto dataset = std::make_shared<ImageDataset>(IndexedImages());
  BatchLoader fresh(dataset, ScaleOnly(), LoaderOptions(2));
  const std::vector<Batch> all = Take(fresh, 30);
  // Mid-epoch (12 batches per epoch) and at an epoch boundary.
  for (int64_t start : {17, 24}) {
    SCOPED_TRACE(::testing::Message() << "start_batch " << start);
    BatchLoader resumed(dataset, ScaleOnly(), LoaderOptions(3, start));
    ExpectSameBatches(Take(resumed, 30 - start),
                      std::vector<Batch>(all.begin() + start, all.end()));
  }
}

// A data set that takes its time (or fails) to produce each sample.
class WrappedDataset final : public Dataset {
 public:
  WrappedDataset(std::shared_ptr<const Dataset> inner, std::chrono::microseconds delay,
                 bool fail = false)
      : inner_(std::move(inner)), delay_(delay), fail_(fail) {}
  int64_t size() const override { return inner_->size(); }
  DataShape Shape() const override { return inner_->Shape(); }
  torch::Tensor NewInputs(int64_t n, bool pinned) const override {
    return inner_->NewInputs(n, pinned);
  }
  torch::Tensor NewTargets(int64_t n, bool pinned) const override {
    return inner_->NewTargets(n, pinned);
  }
  void Fill(int64_t index, int64_t epoch, int64_t row, torch::Tensor& inputs,
            torch::Tensor& targets) const override {
    std::this_thread::sleep_for(delay_);
    if (fail_) throw std::runtime_error("sample " + std::to_string(index) + " is unreadable");
    inner_->Fill(index, epoch, row, inputs, targets);
  }

 private:
  std::shared_ptr<const Dataset> inner_;
  std::chrono::microseconds delay_;
  bool fail_;
};

TEST(BatchLoader, WaitTimeIsMeasuredAndTakenOnce) {
  // 8 samples of 2 ms each: the training loop waits about 16 ms per batch on one thread.
  auto slow = std::make_shared<WrappedDataset>(std::make_shared<ImageDataset>(IndexedImages()),
                                               std::chrono::milliseconds(2));
  BatchLoader loader(slow, ScaleOnly(), LoaderOptions(1));
  // More batches than the ring holds (3), so some had to be waited for.
  Take(loader, 6);
  const double waited = loader.TakeWaitSeconds();
  EXPECT_GT(waited, 0.005);
  EXPECT_LT(waited, 5.0);
  EXPECT_EQ(loader.TakeWaitSeconds(), 0.0);

  BatchLoader fast(std::make_shared<ImageDataset>(IndexedImages()), ScaleOnly(), LoaderOptions(2));
  Take(fast, 3);
  EXPECT_GE(fast.TakeWaitSeconds(), 0.0);
  EXPECT_EQ(fast.TakeWaitSeconds(), 0.0);
}

TEST(BatchLoader, DestroyingALoaderMidEpochDoesNotHang) {
  auto dataset = std::make_shared<ImageDataset>(IndexedImages());
  auto slow = std::make_shared<WrappedDataset>(dataset, std::chrono::milliseconds(1));
  // Producers blocked on a full ring; producers in the middle of a batch; a loader never
  // asked for a batch.
  const std::vector<std::pair<std::shared_ptr<const Dataset>, int>> cases = {
      {dataset, 2}, {slow, 1}, {dataset, 0}};
  for (const auto& [source, taken] : cases) {
    auto loader = std::make_unique<BatchLoader>(source, ScaleOnly(), LoaderOptions(3));
    Take(*loader, taken);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    BatchLoader* raw = loader.release();
    EXPECT_TRUE(FinishesWithin(std::chrono::seconds(10), [raw] { delete raw; }))
        << "after " << taken << " batches";
  }
}

TEST(BatchLoader, ADataSetErrorReachesTheTrainingLoop) {
  auto failing = std::make_shared<WrappedDataset>(std::make_shared<ImageDataset>(IndexedImages()),
                                                  std::chrono::microseconds(0), /*fail=*/true);
  auto* loader = new BatchLoader(failing, ScaleOnly(), LoaderOptions(2));
  auto threw = std::make_shared<std::atomic<bool>>(false);
  const bool returned = FinishesWithin(std::chrono::seconds(10), [loader, threw] {
    try {
      loader->Next();
    } catch (const std::runtime_error& e) {
      *threw = Contains(e.what(), "is unreadable");
    }
  });
  ASSERT_TRUE(returned) << "Next() hangs after a data set error";  // the loader is leaked
  EXPECT_TRUE(*threw);
  delete loader;
}

TEST(BatchLoader, RefusesABatchLargerThanTheData) {
  BatchLoader::Options options = LoaderOptions(1);
  options.batch_size = kImages + 1;
  EXPECT_THROW(BatchLoader(std::make_shared<ImageDataset>(IndexedImages()), ScaleOnly(), options),
               std::invalid_argument);
}

// ---------------------------------------------------------------------------------------
// BatchPrep

TEST(BatchPrep, ImagesComeOutFloatInTheUnitRange) {
  const data::ImageSet set = testing::PatternImages(16, 5, 3, 10);
  torch::Tensor pixels = AllPixels(set).clone();
  const Batch batch = ScaleOnly()(pixels, torch::zeros({16}, torch::kLong), /*train=*/true);
  EXPECT_EQ(batch.inputs.scalar_type(), torch::kFloat32);
  EXPECT_EQ(batch.inputs.sizes().vec(), pixels.sizes().vec());
  EXPECT_GE(batch.inputs.min().item<float>(), 0.0f);
  EXPECT_LE(batch.inputs.max().item<float>(), 1.0f);
  EXPECT_TRUE(torch::equal(batch.inputs.mul(255).round().to(torch::kUInt8), pixels));
  EXPECT_EQ(batch.targets.scalar_type(), torch::kInt64);
}

TEST(BatchPrep, NormalizingWithTheDatasStatisticsGivesZeroMeanAndUnitStd) {
  torch::manual_seed(5);
  // Channels with different brightness and contrast.
  torch::Tensor pixels =
      torch::cat({torch::randint(0, 256, {64, 1, 8, 8}), torch::randint(100, 140, {64, 1, 8, 8}),
                  torch::randint(0, 50, {64, 1, 8, 8})},
                 1)
          .to(torch::kUInt8)
          .contiguous();
  data::ImageSet set;
  set.count = 64;
  set.channels = 3;
  set.height = set.width = 8;
  set.pixels.assign(pixels.data_ptr<uint8_t>(), pixels.data_ptr<uint8_t>() + pixels.numel());
  set.labels.assign(64, 0);
  set.num_classes = 1;
  ImageDataset dataset(set);
  AugmentConfig augment;  // normalize is on by default
  BatchPrep prep =
      BatchPrep::ForImages(augment, dataset.ChannelMean(), dataset.ChannelStd(), torch::kCPU);
  const torch::Tensor x = prep(pixels, torch::zeros({64}, torch::kLong), /*train=*/false).inputs;
  for (int64_t c = 0; c < 3; ++c) {
    const torch::Tensor channel = x.select(1, c);
    const double mean = channel.mean().item<double>();
    const double std = (channel - mean).pow(2).mean().sqrt().item<double>();
    EXPECT_NEAR(mean, 0.0, 1e-4) << "channel " << c;
    EXPECT_NEAR(std, 1.0, 1e-3) << "channel " << c;
  }
}

TEST(BatchPrep, RandomCropKeepsTheShapeAndCutsAWindowOfTheZeroPaddedImage) {
  torch::manual_seed(7);
  constexpr int64_t b = 32, c = 3, h = 6, w = 5, p = 2;
  const torch::Tensor images = torch::rand({b, c, h, w}) + 0.5;  // no pixel is 0
  const torch::Tensor out = RandomCrop(images, p);
  ASSERT_EQ(out.sizes().vec(), images.sizes().vec());
  torch::Tensor padded = torch::zeros({b, c, h + 2 * p, w + 2 * p});
  padded.narrow(2, p, h).narrow(3, p, w).copy_(images);
  std::set<std::pair<int64_t, int64_t>> offsets;
  for (int64_t i = 0; i < b; ++i) {
    int matches = 0;
    for (int64_t dy = 0; dy <= 2 * p; ++dy) {
      for (int64_t dx = 0; dx <= 2 * p; ++dx) {
        if (torch::equal(out[i], padded[i].narrow(1, dy, h).narrow(2, dx, w))) {
          ++matches;
          offsets.insert({dy, dx});
        }
      }
    }
    EXPECT_EQ(matches, 1) << "image " << i << " is not a window of its padded input";
  }
  // 25 possible offsets for 32 images: one offset for all would not be random.
  EXPECT_GT(offsets.size(), 3u);
}

TEST(BatchPrep, RandomHorizontalFlipMirrorsSomeImagesAndLeavesTheOthers) {
  torch::manual_seed(9);
  const torch::Tensor images = torch::rand({64, 3, 4, 5});
  const torch::Tensor out = RandomHorizontalFlip(images);
  ASSERT_EQ(out.sizes().vec(), images.sizes().vec());
  int mirrored = 0;
  for (int64_t i = 0; i < 64; ++i) {
    const bool same = torch::equal(out[i], images[i]);
    const bool mirror = torch::equal(out[i], images[i].flip({2}));
    EXPECT_TRUE(same != mirror) << "image " << i << " is neither the input nor its mirror";
    mirrored += mirror ? 1 : 0;
  }
  EXPECT_GT(mirrored, 0);
  EXPECT_LT(mirrored, 64);
}

TEST(BatchPrep, OnlyTrainingBatchesAreAugmented) {
  torch::manual_seed(11);
  AugmentConfig augment;
  augment.crop_padding = 2;
  augment.horizontal_flip = true;
  augment.normalize = false;
  BatchPrep prep = BatchPrep::ForImages(augment, {0.0}, {1.0}, torch::kCPU);
  const data::ImageSet set = testing::PatternImages(32, 6, 6, 10);
  torch::Tensor pixels = AllPixels(set).clone();
  torch::Tensor scaled = pixels.to(torch::kFloat32).div(255.0);
  torch::Tensor targets = torch::arange(32, torch::kLong);
  EXPECT_TRUE(torch::equal(prep(pixels, targets, /*train=*/false).inputs, scaled));
  const Batch trained = prep(pixels, targets, /*train=*/true);
  EXPECT_EQ(trained.inputs.sizes().vec(), scaled.sizes().vec());
  EXPECT_FALSE(torch::equal(trained.inputs, scaled));
  EXPECT_TRUE(torch::equal(trained.targets, targets));  // augmentation moves no labels
}

// The draws behind the GPU path's crops and flips (tests/gpu/image_prep_gpu_test.cc checks
// the kernel that decodes them); torch::randint draws them alike on a CPU.
TEST(BatchPrep, OneDrawPerImageCoversEveryCropOffsetAndFlipsAboutHalf) {
  torch::manual_seed(13);
  const int64_t n = 4096, p = 4, k = 2 * p + 1;
  const torch::Tensor draws = DrawCropsAndFlips(n, p, /*flip=*/true, torch::kCPU);
  ASSERT_EQ(draws.scalar_type(), torch::kLong);
  ASSERT_EQ(draws.numel(), n);
  std::set<std::pair<int64_t, int64_t>> offsets;
  int64_t flips = 0;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t r = draws[i].item<int64_t>();
    ASSERT_TRUE(r >= 0 && r < 2 * k * k) << r;
    offsets.insert({(r / k) % k, r % k});
    flips += r / (k * k);
  }
  EXPECT_EQ(offsets.size(), static_cast<size_t>(k * k));
  EXPECT_GT(flips, n * 4 / 10);
  EXPECT_LT(flips, n * 6 / 10);
  // Without flipping no draw reaches a flip; without padding only the flip is drawn.
  EXPECT_LT(DrawCropsAndFlips(n, p, /*flip=*/false, torch::kCPU).max().item<int64_t>(), k * k);
  EXPECT_LT(DrawCropsAndFlips(n, 0, /*flip=*/true, torch::kCPU).max().item<int64_t>(), 2);
}

// Synthetic images drawn channels-last for a model that computes so (no copy of each
// batch to convert it) carry their class in their channel means as the default ones do:
// each image's channel means lie nearest its own class's average.
TEST(SyntheticSource, ImagesDrawnChannelsLastCarryTheirClassAlike) {
  SyntheticDataConfig config;
  config.image_shape = {3, 16, 16};
  config.num_classes = 4;
  config.samples_per_epoch = 1000;
  for (const bool channels_last : {false, true}) {
    SyntheticSource source(config, torch::kCPU, 256, /*seed=*/7, /*world_size=*/1);
    source.SetImagesChannelsLast(channels_last);
    const Batch batch = source.Next();
    ASSERT_EQ(batch.inputs.sizes(), (std::vector<int64_t>{256, 3, 16, 16}));
    EXPECT_TRUE(batch.inputs.is_contiguous(channels_last ? at::MemoryFormat::ChannelsLast
                                                         : at::MemoryFormat::Contiguous))
        << "channels_last " << channels_last;
    const torch::Tensor means = batch.inputs.mean({2, 3});  // [256, 3]
    torch::Tensor centroids = torch::zeros({4, 3});
    for (int64_t c = 0; c < 4; ++c) {
      const torch::Tensor mask = batch.targets == c;
      ASSERT_GT(mask.sum().item<int64_t>(), 0) << "class " << c << " never drawn";
      centroids[c] = means.index({mask}).mean(0);
    }
    const torch::Tensor nearest = torch::cdist(means, centroids).argmin(1);
    EXPECT_GT((nearest == batch.targets).to(torch::kFloat).mean().item<double>(), 0.95)
        << "channels_last " << channels_last;
  }
}

TEST(BatchPrep, CpuImagesTakeAtensPathEvenWhenTheModelWantsChannelsLast) {
  const data::ImageSet set = testing::PatternImages(8, 5, 3, 10);
  torch::Tensor pixels = AllPixels(set).clone();
  EXPECT_FALSE(ImagePrepUsesOwnKernel(pixels));
  BatchPrep prep = ScaleOnly();
  prep.set_channels_last(true);
  const Batch batch = prep(pixels, torch::zeros({8}, torch::kLong), /*train=*/false);
  EXPECT_TRUE(torch::equal(batch.inputs, pixels.to(torch::kFloat32).div(255.0)));
}

TEST(BatchPrep, TokensComeOutInt64) {
  torch::Tensor inputs = torch::tensor({1, 65535, 7}, torch::kInt32).view({1, 3});
  torch::Tensor targets = torch::tensor({65535, 7, 0}, torch::kInt32).view({1, 3});
  const Batch batch = BatchPrep::ForTokens()(inputs, targets, /*train=*/true);
  EXPECT_EQ(batch.inputs.scalar_type(), torch::kInt64);
  EXPECT_EQ(batch.targets.scalar_type(), torch::kInt64);
  EXPECT_EQ(ToVector(batch.inputs), (std::vector<int64_t>{1, 65535, 7}));
  EXPECT_EQ(ToVector(batch.targets), (std::vector<int64_t>{65535, 7, 0}));
}

// ---------------------------------------------------------------------------------------
// TokenDataset

std::shared_ptr<const data::TokenFile> TokenFileOf(const TempDir& dir, const std::string& name,
                                                   const std::vector<uint16_t>& tokens) {
  testing::WriteTokens(dir.File(name), tokens);
  auto file = data::TokenFile::Open(dir.File(name));
  EXPECT_TRUE(file.ok()) << file.status();
  return file.ok() ? *file : nullptr;
}

// Each window's first input token, for every window of `epoch`.
std::vector<int64_t> WindowStarts(const TokenDataset& dataset, int64_t context, int64_t epoch,
                                  const std::function<int64_t(int64_t)>& position_of) {
  torch::Tensor inputs = dataset.NewInputs(dataset.size(), false);
  torch::Tensor targets = dataset.NewTargets(dataset.size(), false);
  for (int64_t i = 0; i < dataset.size(); ++i) dataset.Fill(i, epoch, i, inputs, targets);
  EXPECT_EQ(inputs.scalar_type(), torch::kInt32);
  std::vector<int64_t> starts;
  for (int64_t i = 0; i < dataset.size(); ++i) {
    const std::vector<int64_t> in = ToVector(inputs[i]);
    const std::vector<int64_t> tg = ToVector(targets[i]);
    const int64_t start = position_of(in[0]);
    for (int64_t t = 0; t < context; ++t) {
      EXPECT_EQ(position_of(in[static_cast<size_t>(t)]), start + t) << "window " << i;
      EXPECT_EQ(position_of(tg[static_cast<size_t>(t)]), start + t + 1) << "window " << i;
    }
    starts.push_back(start);
  }
  return starts;
}

TEST(TokenDataset, TargetsAreTheInputsShiftedByOneTokenReadBackExactly) {
  TempDir dir;
  // Ids run past 65535 and wrap to 0: high ids must not come back negative.
  constexpr uint16_t kFirst = 65000;
  auto file = TokenFileOf(dir, "train.bin", testing::CountingTokens(1000, kFirst));
  ASSERT_NE(file, nullptr);
  constexpr int64_t kContext = 16;
  TokenDataset dataset(file, 0, 1000, kContext, 65536, /*seed=*/5);
  EXPECT_EQ(dataset.size(), (1000 - kContext) / kContext);
  EXPECT_EQ(dataset.Shape().kind, DataShape::Kind::kTokens);
  EXPECT_EQ(dataset.Shape().sample, (std::vector<int64_t>{kContext}));
  EXPECT_EQ(dataset.Shape().vocab_size, 65536);
  auto position = [](int64_t id) { return (id - kFirst + 65536) % 65536; };
  std::set<int64_t> shifts;
  for (int64_t epoch = 0; epoch < 8; ++epoch) {
    const std::vector<int64_t> starts = WindowStarts(dataset, kContext, epoch, position);
    // Windows tile the data: one shift per epoch, then a window every `context` tokens.
    const int64_t shift = starts[0];
    EXPECT_GE(shift, 0);
    EXPECT_LT(shift, kContext);
    for (size_t i = 0; i < starts.size(); ++i) {
      EXPECT_EQ(starts[i], shift + static_cast<int64_t>(i) * kContext);
    }
    EXPECT_LT(starts.back() + kContext, 1000);  // the last target is in the file
    shifts.insert(shift);
  }
  EXPECT_GT(shifts.size(), 1u) << "the windows fall the same way every epoch";
}

TEST(TokenDataset, WindowsStayWithinTheirRange) {
  TempDir dir;
  auto file = TokenFileOf(dir, "tokens.bin", testing::CountingTokens(1000));
  ASSERT_NE(file, nullptr);
  TokenDataset held_out(file, 900, 1000, 8, 65536, 3);
  EXPECT_EQ(held_out.size(), (100 - 8) / 8);
  for (int64_t epoch = 0; epoch < 5; ++epoch) {
    for (int64_t start : WindowStarts(held_out, 8, epoch, [](int64_t id) { return id; })) {
      EXPECT_GE(start, 900);
      EXPECT_LT(start + 8, 1000);
    }
  }
}

TEST(TokenDataset, TooFewTokensForOneWindowAreRefused) {
  TempDir dir;
  // One window needs room for a shift of up to context - 1 and the target's extra token.
  auto file = TokenFileOf(dir, "short.bin", testing::CountingTokens(31));
  ASSERT_NE(file, nullptr);
  try {
    TokenDataset(file, 0, 31, 16, 256, 1);
    ADD_FAILURE() << "31 tokens accepted for context 16";
  } catch (const std::invalid_argument& e) {
    EXPECT_PRED2(Contains, e.what(), dir.File("short.bin"));
    EXPECT_PRED2(Contains, e.what(), "data.tokens.context");
  }
  auto enough = TokenFileOf(dir, "enough.bin", testing::CountingTokens(32));
  ASSERT_NE(enough, nullptr);
  EXPECT_EQ(TokenDataset(enough, 0, 32, 16, 256, 1).size(), 1);
}

// ---------------------------------------------------------------------------------------
// Format readers

void ExpectSameImages(const data::ImageSet& a, const data::ImageSet& b) {
  EXPECT_EQ(a.count, b.count);
  EXPECT_EQ(a.channels, b.channels);
  EXPECT_EQ(a.height, b.height);
  EXPECT_EQ(a.width, b.width);
  EXPECT_EQ(a.num_classes, b.num_classes);
  EXPECT_EQ(a.pixels, b.pixels);
  EXPECT_EQ(a.labels, b.labels);
}

TEST(MnistFormat, PlainAndGzippedFoldersReadTheSame) {
  TempDir dir;
  const std::string plain = dir.File("plain"), gzipped = dir.File("gz");
  mkdir(plain.c_str(), 0755);
  mkdir(gzipped.c_str(), 0755);
  // 7 rows of 5: height and width must not be swapped.
  const data::ImageSet train = testing::PatternImages(30, 7, 5, 10);
  const data::ImageSet test = testing::PatternImages(12, 7, 5, 10, /*salt=*/3);
  testing::WriteMnistFolder(plain, train, test, /*gzip=*/false);
  testing::WriteMnistFolder(gzipped, train, test, /*gzip=*/true);
  ASSERT_FALSE(files::Exists(gzipped + "/" + testing::kMnistTrainImages));
  auto a = data::ReadMnistFolder(plain);
  auto b = data::ReadMnistFolder(gzipped);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  ExpectSameImages(a->train, train);
  ExpectSameImages(a->test, test);
  ExpectSameImages(b->train, train);
  ExpectSameImages(b->test, test);
}

TEST(MnistFormat, NumClassesCoversTheLargestLabelOfEitherSplit) {
  TempDir dir;
  data::ImageSet train = testing::PatternImages(10, 2, 2, 3);  // labels 0..2
  data::ImageSet test = testing::PatternImages(4, 2, 2, 3);
  test.labels[1] = 6;
  testing::WriteMnistFolder(dir.path(), train, test);
  auto splits = data::ReadMnistFolder(dir.path());
  ASSERT_TRUE(splits.ok()) << splits.status();
  EXPECT_EQ(splits->train.num_classes, 7);
  EXPECT_EQ(splits->test.num_classes, 7);
}

// An MNIST folder in the temp dir, with one of its files then spoiled by `spoil`.
struct MnistFolderCase {
  std::string name;
  std::string spoiled_file;  // must appear in the error
  std::string problem;       // must appear in the error
  std::function<void(const std::string& folder)> spoil;
};

TEST(MnistFormat, ErrorsNameTheFileAndTheProblem) {
  using testing::IdxBytes;
  using testing::WriteBytes;
  const std::vector<MnistFolderCase> cases = {
      {"missing", testing::kMnistTestLabels, "no t10k-labels-idx1-ubyte",
       [](const std::string& f) { std::remove((f + "/" + testing::kMnistTestLabels).c_str()); }},
      {"truncated", testing::kMnistTrainImages, "truncated",
       [](const std::string& f) {
         const std::string path = f + "/" + testing::kMnistTrainImages;
         struct stat st;
         ASSERT_EQ(stat(path.c_str(), &st), 0);
         ASSERT_EQ(truncate(path.c_str(), st.st_size - 5), 0);
       }},
      {"truncated header", testing::kMnistTrainLabels, "truncated",
       [](const std::string& f) {
         WriteBytes(f + "/" + testing::kMnistTrainLabels, std::string("\0\0\x08", 3));
       }},
      {"wrong magic", testing::kMnistTrainLabels, "magic",
       [](const std::string& f) {
         // An images file where the labels belong.
         WriteBytes(f + "/" + testing::kMnistTrainLabels,
                    IdxBytes({1, 1, 20}, std::vector<uint8_t>(20)));
       }},
      {"not idx", testing::kMnistTestImages, "magic",
       [](const std::string& f) {
         WriteBytes(f + "/" + testing::kMnistTestImages, std::string(100, 'x'));
       }},
      {"count mismatch", testing::kMnistTrainLabels, "19 labels",
       [](const std::string& f) {
         WriteBytes(f + "/" + testing::kMnistTrainLabels, IdxBytes({19}, std::vector<uint8_t>(19)));
       }},
      {"longer than header", testing::kMnistTestLabels, "longer than its header",
       [](const std::string& f) {
         WriteBytes(f + "/" + testing::kMnistTestLabels, IdxBytes({8}, std::vector<uint8_t>(9)));
       }},
  };
  for (const MnistFolderCase& c : cases) {
    SCOPED_TRACE(c.name);
    TempDir dir;
    testing::WriteMnistFolder(dir.path(), testing::PatternImages(20, 3, 3, 10),
                              testing::PatternImages(8, 3, 3, 10));
    c.spoil(dir.path());
    auto splits = data::ReadMnistFolder(dir.path());
    ASSERT_FALSE(splits.ok());
    const std::string message(splits.status().message());
    EXPECT_PRED2(Contains, message, c.spoiled_file);
    EXPECT_PRED2(Contains, message, c.problem);
  }
}

TEST(IdxFormat, TruncatedGzippedFilesNameTheFile) {
  TempDir dir;
  const std::string path = dir.File("labels.gz");
  testing::WriteBytes(path, testing::IdxBytes({5000}, std::vector<uint8_t>(5000, 3)),
                      /*gzip=*/true);
  const std::string whole = testing::ReadBytes(path);
  // Cut off the gzip trailer and some of the deflate stream.
  testing::WriteBytes(path, whole.substr(0, whole.size() - 12));
  auto array = data::ReadIdxFile(path, 1);
  ASSERT_FALSE(array.ok());
  EXPECT_PRED2(Contains, std::string(array.status().message()), path);
}

TEST(IdxFormat, AHeaderWhoseSizeOverflowsIsRefused) {
  TempDir dir;
  // 2^22 * 2^21 * 2^21 = 2^64 bytes: zero, in 64 bits.
  const std::string path = dir.File("images");
  testing::WriteBytes(path, testing::IdxBytes({1u << 22, 1u << 21, 1u << 21}, {}));
  auto array = data::ReadIdxFile(path, 3);
  ASSERT_FALSE(array.ok()) << "read as " << array->bytes.size() << " bytes";
  EXPECT_PRED2(Contains, std::string(array.status().message()), path);
}

int64_t PeakResidentKiB() {
  struct rusage usage;
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_maxrss;
}

TEST(IdxFormat, AShortFileWhoseHeaderClaimsGigabytesFailsWithoutAllocatingThem) {
  TempDir dir;
  // The header claims 2^16 images of 256x256 (4 GiB); the file holds 100 bytes of them.
  const std::string path = dir.File("images");
  testing::WriteBytes(path, testing::IdxBytes({1u << 16, 256, 256}, std::vector<uint8_t>(100)));
  const int64_t before = PeakResidentKiB();
  auto array = data::ReadIdxFile(path, 3);
  ASSERT_FALSE(array.ok());
  EXPECT_PRED2(Contains, std::string(array.status().message()), path);
  EXPECT_PRED2(Contains, std::string(array.status().message()), "truncated");
  EXPECT_LT(PeakResidentKiB() - before, 512 * 1024) << "KiB more at peak";
}

TEST(Cifar10Format, ReadsTheRecordsOfAllBatches) {
  TempDir dir;
  testing::WriteCifarFolder(dir.path(), /*per_batch=*/3, /*test_records=*/4);
  auto splits = data::ReadCifar10Folder(dir.path());
  ASSERT_TRUE(splits.ok()) << splits.status();
  const data::ImageSet& train = splits->train;
  EXPECT_EQ(train.count, 15);
  EXPECT_EQ(train.channels, 3);
  EXPECT_EQ(train.height, 32);
  EXPECT_EQ(train.width, 32);
  EXPECT_EQ(train.num_classes, 10);
  EXPECT_EQ(train.labels, (std::vector<uint8_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1, 2, 3, 4}));
  ASSERT_EQ(static_cast<int64_t>(train.pixels.size()), 15 * 3072);
  // Record 1 of data_batch_2.bin (sample 4): its pixel k is (13 + k + 2) % 256.
  for (int64_t k : {0, 1, 1023, 1024, 3071}) {
    EXPECT_EQ(train.pixels[static_cast<size_t>(4 * 3072 + k)], (13 + k + 2) % 256) << k;
  }
  EXPECT_EQ(splits->test.count, 4);
  EXPECT_EQ(splits->test.labels, (std::vector<uint8_t>{5, 6, 7, 8}));
  EXPECT_EQ(splits->test.pixels[0], 100);
}

TEST(Cifar10Format, RefusesPartialRecordsLabelsAboveNineAndMissingFiles) {
  struct Case {
    std::string name;
    std::string file;
    std::string problem;
    std::string content;  // empty: remove the file
  };
  const std::vector<Case> cases = {
      {"partial record", "data_batch_3.bin", "not a whole number",
       testing::CifarRecords({1, 2}) + std::string(10, '\0')},
      {"empty", "test_batch.bin", "not a whole number", std::string()},
      // The label byte is the file's content: named by its record, not quoted.
      {"label 10", "data_batch_5.bin", "record 1 has a label above 9",
       testing::CifarRecords({1, 10, 2})},
      {"missing", "data_batch_4.bin", "cannot open", std::string()},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    TempDir dir;
    testing::WriteCifarFolder(dir.path(), 2, 2);
    if (c.name == "missing") {
      std::remove(dir.File(c.file).c_str());
    } else {
      testing::WriteBytes(dir.File(c.file), c.content);
    }
    auto splits = data::ReadCifar10Folder(dir.path());
    ASSERT_FALSE(splits.ok());
    const std::string message(splits.status().message());
    EXPECT_PRED2(Contains, message, dir.File(c.file));
    EXPECT_PRED2(Contains, message, c.problem);
  }
}

TEST(TokenFileFormat, ReadsLittleEndianIdsAndRefusesOddSizes) {
  TempDir dir;
  testing::WriteTokens(dir.File("ok.bin"), {1, 258, 65535, 0});
  auto file = data::TokenFile::Open(dir.File("ok.bin"));
  ASSERT_TRUE(file.ok()) << file.status();
  ASSERT_EQ((*file)->size(), 4);
  EXPECT_EQ((*file)->tokens()[1], 258);
  EXPECT_EQ((*file)->tokens()[2], 65535);

  testing::WriteBytes(dir.File("odd.bin"), std::string(5, '\1'));
  auto odd = data::TokenFile::Open(dir.File("odd.bin"));
  ASSERT_FALSE(odd.ok());
  EXPECT_PRED2(Contains, std::string(odd.status().message()), dir.File("odd.bin"));
  EXPECT_PRED2(Contains, std::string(odd.status().message()), "uint16");

  auto missing = data::TokenFile::Open(dir.File("absent.bin"));
  ASSERT_FALSE(missing.ok());
  EXPECT_PRED2(Contains, std::string(missing.status().message()), dir.File("absent.bin"));
}

TEST(TokenFileFormat, FirstOutOfVocabularyFindsTheFirstBadId) {
  TempDir dir;
  testing::WriteTokens(dir.File("t.bin"), {1, 2, 255, 300, 5, 256, 40000});
  auto file = data::TokenFile::Open(dir.File("t.bin"));
  ASSERT_TRUE(file.ok()) << file.status();
  int64_t id = -1;
  EXPECT_EQ((*file)->FirstOutOfVocabulary(256, &id), 3);
  EXPECT_EQ(id, 300);
  EXPECT_EQ((*file)->FirstOutOfVocabulary(301, &id), 6);
  EXPECT_EQ(id, 40000);
  EXPECT_EQ((*file)->FirstOutOfVocabulary(40001, &id), -1);
}

TEST(TokenFileFormat, TokenizeBytesWritesOneIdPerInputByte) {
  TempDir dir;
  const std::string text = std::string("Hello, caf\xc3\xa9\n", 13) + std::string("\0\xff", 2);
  testing::WriteBytes(dir.File("in.txt"), text);
  auto count = data::TokenizeBytes(dir.File("in.txt"), dir.File("out.bin"));
  ASSERT_TRUE(count.ok()) << count.status();
  EXPECT_EQ(*count, static_cast<int64_t>(text.size()));
  auto file = data::TokenFile::Open(dir.File("out.bin"));
  ASSERT_TRUE(file.ok()) << file.status();
  ASSERT_EQ((*file)->size(), static_cast<int64_t>(text.size()));
  for (size_t i = 0; i < text.size(); ++i) {
    EXPECT_EQ((*file)->tokens()[i], static_cast<unsigned char>(text[i])) << "byte " << i;
  }

  auto missing = data::TokenizeBytes(dir.File("absent.txt"), dir.File("x.bin"));
  ASSERT_FALSE(missing.ok());
  EXPECT_PRED2(Contains, std::string(missing.status().message()), dir.File("absent.txt"));

  // A full disk (/dev/full refuses every write), even for a file small enough to sit in
  // the stream's buffer until it is closed.
  if (access("/dev/full", W_OK) == 0) {
    auto full = data::TokenizeBytes(dir.File("in.txt"), "/dev/full");
    ASSERT_FALSE(full.ok()) << "tokens written to a full disk were reported stored";
    EXPECT_PRED2(Contains, std::string(full.status().message()),
                 "/dev/full: cannot write: No space left on device");
  }
}

// ---------------------------------------------------------------------------------------
// OpenData

TrainTask ImageTask(const std::string& folder) {
  TrainTask task;
  task.data.source = MnistDataConfig{folder};
  task.data.loader.threads = 2;
  task.data.loader.prefetch = 2;
  task.training.batch_size = 8;
  task.training.seed = 3;
  return task;
}

TEST(OpenData, AnMnistFolderGivesTrainingBatchesAndAnEvalSetOfEveryTestSample) {
  TempDir dir;
  const data::ImageSet train = testing::PatternImages(40, 6, 5, 10);
  const data::ImageSet test = testing::PatternImages(21, 6, 5, 10, /*salt=*/100);
  testing::WriteMnistFolder(dir.path(), train, test, /*gzip=*/true);

  DataPipeline pipeline = OpenData(ImageTask(dir.path()), torch::kCPU, 0);
  const DataShape shape = pipeline.train->Shape();
  EXPECT_EQ(shape.kind, DataShape::Kind::kImage);
  EXPECT_EQ(shape.sample, (std::vector<int64_t>{1, 6, 5}));
  EXPECT_EQ(shape.num_classes, 10);
  EXPECT_EQ(pipeline.train->BatchesPerEpoch(), 5);
  const Batch batch = pipeline.train->Next();
  EXPECT_EQ(batch.inputs.sizes().vec(), (std::vector<int64_t>{8, 1, 6, 5}));
  EXPECT_EQ(batch.inputs.scalar_type(), torch::kFloat32);
  EXPECT_EQ(batch.targets.scalar_type(), torch::kInt64);

  // Evaluation: every test sample once, in order, the last batch short, normalized with
  // the training split's statistics.
  ImageDataset train_stats(train);
  const double mean = train_stats.ChannelMean()[0], std = train_stats.ChannelStd()[0];
  ASSERT_EQ(pipeline.eval->batches(), 3);
  std::vector<int64_t> labels;
  std::vector<torch::Tensor> images;
  for (int64_t i = 0; i < pipeline.eval->batches(); ++i) {
    const Batch b = pipeline.eval->Get(i);
    EXPECT_EQ(b.inputs.size(0), i < 2 ? 8 : 5);
    for (int64_t label : ToVector(b.targets)) labels.push_back(label);
    images.push_back(b.inputs);
  }
  EXPECT_EQ(labels, std::vector<int64_t>(test.labels.begin(), test.labels.end()));
  const torch::Tensor expected = AllPixels(test).to(torch::kFloat32).div(255.0).sub(mean).div(std);
  EXPECT_TRUE(torch::allclose(torch::cat(images), expected, 1e-4, 1e-5));
}

TEST(OpenData, EvalBatchesAndRanksShapeTheSources) {
  TempDir dir;
  testing::WriteMnistFolder(dir.path(), testing::PatternImages(40, 4, 4, 10),
                            testing::PatternImages(30, 4, 4, 10));
  TrainTask task = ImageTask(dir.path());
  task.eval.batches = 2;
  task.rank = 1;
  task.world_size = 2;
  DataPipeline pipeline = OpenData(task, torch::kCPU, 0);
  EXPECT_EQ(pipeline.eval->batches(), 2);
  EXPECT_EQ(pipeline.train->BatchesPerEpoch(), 40 / 2 / 8);
}

TEST(OpenData, ABatchLargerThanTheTrainingSplitIsRefused) {
  TempDir dir;
  testing::WriteMnistFolder(dir.path(), testing::PatternImages(7, 4, 4, 10),
                            testing::PatternImages(30, 4, 4, 10));
  try {
    OpenData(ImageTask(dir.path()), torch::kCPU, 0);
    ADD_FAILURE() << "a batch of 8 from 7 samples was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_PRED2(Contains, e.what(), "training.batch_size");
  }
}

// A missing file is NOT_FOUND (it may be there for a later attempt: a volume still being
// mounted), and the error names it.
TEST(OpenData, ABrokenFolderIsRefusedNamingTheFile) {
  TempDir dir;
  testing::WriteMnistFolder(dir.path(), testing::PatternImages(20, 4, 4, 10),
                            testing::PatternImages(30, 4, 4, 10));
  std::remove(dir.File(testing::kMnistTrainImages).c_str());
  try {
    OpenData(ImageTask(dir.path()), torch::kCPU, 0);
    ADD_FAILURE() << "a folder without training images was accepted";
  } catch (const StatusError& e) {
    EXPECT_EQ(e.code(), absl::StatusCode::kNotFound) << e.what();
    EXPECT_PRED2(Contains, e.what(), testing::kMnistTrainImages);
  }
}

TrainTask TokenTask(const std::string& train, const std::string& val, int64_t context,
                    int64_t vocab_size = 256) {
  TrainTask task;
  TokenDataConfig tokens;
  tokens.train_path = train;
  tokens.val_path = val;
  tokens.vocab_size = vocab_size;
  tokens.context = context;
  task.data.source = tokens;
  task.data.loader.threads = 2;
  task.training.batch_size = 4;
  return task;
}

TEST(OpenData, ATokenFileHoldsOutItsLastTenthForEvaluation) {
  TempDir dir;
  // Each id is its position in the file.
  testing::WriteTokens(dir.File("train.bin"), testing::CountingTokens(1000));
  DataPipeline pipeline =
      OpenData(TokenTask(dir.File("train.bin"), "", 16, /*vocab_size=*/1000), torch::kCPU, 0);
  EXPECT_EQ(pipeline.train->Shape().kind, DataShape::Kind::kTokens);
  EXPECT_EQ(pipeline.train->Shape().sample, (std::vector<int64_t>{16}));
  EXPECT_EQ(pipeline.train->Shape().vocab_size, 1000);
  // 900 training tokens: 55 windows of 16; 100 held out: 5 windows.
  EXPECT_EQ(pipeline.train->BatchesPerEpoch(), 55 / 4);
  for (int64_t i = 0; i < pipeline.train->BatchesPerEpoch(); ++i) {
    const Batch b = pipeline.train->Next();
    EXPECT_EQ(b.inputs.sizes().vec(), (std::vector<int64_t>{4, 16}));
    EXPECT_EQ(b.targets.scalar_type(), torch::kInt64);
    EXPECT_LT(b.targets.max().item<int64_t>(), 900) << "training read a held-out token";
  }
  ASSERT_EQ(pipeline.eval->batches(), 2);
  for (int64_t i = 0; i < pipeline.eval->batches(); ++i) {
    const Batch b = pipeline.eval->Get(i);
    EXPECT_EQ(b.inputs.size(0), i == 0 ? 4 : 1);
    EXPECT_EQ(b.inputs.scalar_type(), torch::kInt64);
    EXPECT_GE(b.inputs.min().item<int64_t>(), 900) << "evaluation read a training token";
    EXPECT_TRUE(torch::equal(b.targets, b.inputs + 1));
  }
}

TEST(OpenData, AValidationFileNeedsRoomForOneShiftedWindow) {
  TempDir dir;
  testing::WriteTokens(dir.File("train.bin"), testing::CountingTokens(400, 0, 256));
  testing::WriteTokens(dir.File("val_ok.bin"), testing::CountingTokens(32, 0, 256));
  testing::WriteTokens(dir.File("val_short.bin"), testing::CountingTokens(31, 0, 256));
  DataPipeline ok =
      OpenData(TokenTask(dir.File("train.bin"), dir.File("val_ok.bin"), 16), torch::kCPU, 0);
  EXPECT_EQ(ok.eval->batches(), 1);
  EXPECT_EQ(ok.train->BatchesPerEpoch(), (400 - 16) / 16 / 4);
  try {
    OpenData(TokenTask(dir.File("train.bin"), dir.File("val_short.bin"), 16), torch::kCPU, 0);
    ADD_FAILURE() << "31 validation tokens accepted for context 16";
  } catch (const std::invalid_argument& e) {
    EXPECT_PRED2(Contains, e.what(), dir.File("val_short.bin"));
  }
}

TEST(OpenData, ATokenIdOutsideTheVocabularyIsRefusedNamingTheFile) {
  TempDir dir;
  std::vector<uint16_t> tokens = testing::CountingTokens(400, 0, 256);
  testing::WriteTokens(dir.File("train.bin"), tokens);
  tokens[123] = 256;
  testing::WriteTokens(dir.File("val.bin"), tokens);
  try {
    OpenData(TokenTask(dir.File("train.bin"), dir.File("val.bin"), 16), torch::kCPU, 0);
    ADD_FAILURE() << "id 256 accepted with vocab_size 256";
  } catch (const std::invalid_argument& e) {
    EXPECT_PRED2(Contains, e.what(), dir.File("val.bin"));
    // By its position: the id itself is the file's content and stays out of messages.
    EXPECT_PRED2(Contains, e.what(), "token 123 is not below data.tokens.vocab_size 256");
    EXPECT_FALSE(Contains(e.what(), "is 256")) << e.what();
  }
}

}  // namespace
}  // namespace stoke::worker
