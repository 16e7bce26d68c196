// The one table of job defaults: what a job gets for every field it leaves unset. The
// coordinator fills a submitted spec from it (spec/job_spec_rules.cc, data_checks.cc),
// the worker's plain structs take it as their in-class defaults (worker/common/task.h), and
// the worker's link falls back to it (worker/link/task_translation.cc), so a TrainTask built
// directly (tests, stoke-bench) trains as the same job submitted would. Plain constants:
// no torch, no protobuf, no gRPC.
#pragma once

#include <cstdint>
#include <limits>

namespace stoke::defaults {

// data.synthetic, and what the coordinator assumes of it when the spec is silent.
inline constexpr int64_t kSyntheticFeatures = 256;
inline constexpr int64_t kSyntheticClasses = 10;
inline constexpr int64_t kSyntheticSamplesPerEpoch = 65536;
// data.tokens (and synthetic token sequences).
inline constexpr int64_t kVocabSize = 256;
inline constexpr int64_t kContext = 256;
// data.loader and data.augment.
inline constexpr int kLoaderPrefetch = 4;
inline constexpr bool kPinMemory = true;
inline constexpr bool kShuffle = true;
inline constexpr bool kNormalize = true;
// data.arrays without validation arrays: the share of the rows held out.
inline constexpr double kValFraction = 0.1;
// data.images.
inline constexpr int64_t kImageSize = 224;
inline constexpr int kImageChannels = 3;
// data.shards: samples each rank's stream is shuffled through.
inline constexpr int64_t kShuffleBuffer = 10000;
inline constexpr double kMinCropArea = 0.08;
// Bytes of a text sample (a .txt member of a shard) a model sees.
inline constexpr int64_t kTextLength = 256;
// data.max_bad_fraction: the share of a data set's files that may be undecodable.
inline constexpr double kMaxBadFraction = 0.001;

// model.*: an MLP's one hidden layer is this many times its input width.
inline constexpr uint64_t kMlpHiddenPerInput = 4;
// That layer's width for `input` inputs, the rule's one home; UINT64_MAX where the true
// width does not fit (the size estimate saturates; the worker refuses any input large
// enough to come near).
constexpr uint64_t DefaultMlpHidden(uint64_t input) {
  return input > std::numeric_limits<uint64_t>::max() / kMlpHiddenPerInput
             ? std::numeric_limits<uint64_t>::max()
             : input * kMlpHiddenPerInput;
}
// resources.preemptible, when unset: true for priorities below this (spec/preemptible.h).
inline constexpr int32_t kPreemptibleBelowPriority = 0;
inline constexpr int64_t kCnnChannels[] = {32, 64};
inline constexpr int64_t kCnnHidden = 128;
inline constexpr int kResNetDepth = 18;
inline constexpr int64_t kGptLayers = 6;
inline constexpr int64_t kGptHeads = 6;
inline constexpr int64_t kGptWidth = 384;

// optimizer.*: AdamW with PyTorch's betas and eps.
inline constexpr double kLearningRate = 1e-3;
inline constexpr double kAdamBeta1 = 0.9;
inline constexpr double kAdamBeta2 = 0.999;
inline constexpr double kAdamEps = 1e-8;
inline constexpr double kMinLrRatio = 0.1;

// training.*, metrics.*, checkpoint.*.
inline constexpr int64_t kBatchSize = 256;
inline constexpr int64_t kGradAccumSteps = 1;
inline constexpr uint64_t kSeed = 1;
inline constexpr uint32_t kMetricsIntervalSteps = 50;
inline constexpr uint32_t kCheckpointIntervalSteps = 1000;
inline constexpr uint32_t kCheckpointKeep = 3;
// fp16's dynamic loss scale (PyTorch's GradScaler defaults).
inline constexpr double kLossScaleInitial = 65536.0;
inline constexpr uint32_t kLossScaleGrowthInterval = 2000;
inline constexpr double kLossScaleGrowthFactor = 2.0;
inline constexpr double kLossScaleBackoffFactor = 0.5;

// resources.*, max_restarts, distributed.*.
inline constexpr uint32_t kGpus = 1;
inline constexpr uint32_t kMaxRestarts = 3;
inline constexpr uint32_t kDistributedTimeoutSeconds = 60;
// Script jobs: seconds from a cancel to SIGKILL.
inline constexpr uint32_t kGraceSeconds = 30;
inline constexpr int64_t kBucketMb = 25;
// The first bucket (the last layers' gradients, ready first) is small, so that
// communication starts early in backward.
inline constexpr int64_t kFirstBucketBytes = int64_t{1} << 20;

}  // namespace stoke::defaults
