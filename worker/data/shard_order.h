// The order a rank reads data.shards' samples in, as WebDataset streams them: each rank
// reads its own shards (shard i belongs to rank i mod world), in a fresh order every epoch,
// each from its first sample to its last, through a shuffle buffer: a sample read joins
// the buffer and a random one of the buffer is taken out. Reads stay sequential within a
// window of `shuffle_buffer` samples, yet the order is a function of (seed, epoch, rank)
// alone: a restarted attempt computes it again and resumes at the exact sample.
#pragma once

#include <cstdint>
#include <vector>

#include "worker/data/epoch_sampler.h"

namespace stoke::worker {

struct ShardStream {
  std::vector<int64_t> shard_sizes;  // samples of each shard; shard k's ids follow shard k-1's
  int rank = 0;
  int world_size = 1;
  uint64_t seed = 1;
  int64_t shuffle_buffer = 10000;
  bool shuffle = true;  // false: shards and samples in stored order
};

// Samples every rank takes an epoch: the fewest any rank's shards hold, so that all ranks
// run as many steps. Throws std::invalid_argument (data.shards.urls) when there are fewer
// shards than ranks.
int64_t ShardSamplesPerRank(const ShardStream& stream);

// This rank's sample ids of `epoch`, in the order it reads them (ShardSamplesPerRank of
// them).
std::vector<int64_t> ShardEpochOrder(const ShardStream& stream, int64_t epoch);

// A sampler over that order.
EpochSampler::RankOrder ShardRankOrder(ShardStream stream);

}  // namespace stoke::worker
