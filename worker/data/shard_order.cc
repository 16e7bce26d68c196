#include "worker/data/shard_order.h"

#include <algorithm>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>

#include "formats/shard_files.h"

namespace stoke::worker {
namespace {

// Rank r's shards, in stored order.
std::vector<int64_t> ShardsOf(const ShardStream& stream, int rank) {
  std::vector<int64_t> shards;
  for (int64_t k = rank; k < static_cast<int64_t>(stream.shard_sizes.size());
       k += stream.world_size) {
    shards.push_back(k);
  }
  return shards;
}

}  // namespace

int64_t ShardSamplesPerRank(const ShardStream& stream) {
  const int64_t samples = data::SamplesPerRank(stream.shard_sizes, stream.world_size);
  if (samples == 0) {
    throw std::invalid_argument("data.shards.urls: " + std::to_string(stream.shard_sizes.size()) +
                                " shard(s) for " + std::to_string(stream.world_size) +
                                " ranks; each rank reads shards of its own");
  }
  return samples;
}

std::vector<int64_t> ShardEpochOrder(const ShardStream& stream, int64_t epoch) {
  std::vector<int64_t> first(stream.shard_sizes.size() + 1, 0);
  for (size_t k = 0; k < stream.shard_sizes.size(); ++k) {
    first[k + 1] = first[k] + stream.shard_sizes[k];
  }
  std::vector<int64_t> shards = ShardsOf(stream, stream.rank);
  const int64_t wanted = ShardSamplesPerRank(stream);
  std::vector<int64_t> order;
  order.reserve(static_cast<size_t>(wanted));
  if (!stream.shuffle) {
    for (int64_t k : shards) {
      for (int64_t id = first[k]; id < first[k + 1] && static_cast<int64_t>(order.size()) < wanted;
           ++id) {
        order.push_back(id);
      }
    }
    return order;
  }
  // Seeded by (seed, epoch, rank): ranks differ, and every epoch is new.
  std::mt19937_64 rng(stream.seed * 0x9E3779B97F4A7C15ull +
                      (static_cast<uint64_t>(epoch) + 1) * 0xBF58476D1CE4E5B9ull +
                      static_cast<uint64_t>(stream.rank));
  std::shuffle(shards.begin(), shards.end(), rng);
  const auto capacity = static_cast<size_t>(std::max<int64_t>(1, stream.shuffle_buffer));
  std::vector<int64_t> buffer;
  buffer.reserve(capacity);
  // Takes a random sample out of the buffer (the last one takes its place).
  auto take = [&] {
    std::uniform_int_distribution<size_t> pick(0, buffer.size() - 1);
    const size_t i = pick(rng);
    order.push_back(buffer[i]);
    buffer[i] = buffer.back();
    buffer.pop_back();
  };
  for (int64_t k : shards) {
    for (int64_t id = first[k]; id < first[k + 1]; ++id) {
      if (buffer.size() == capacity) take();
      buffer.push_back(id);
      if (static_cast<int64_t>(order.size()) == wanted) return order;
    }
  }
  while (!buffer.empty() && static_cast<int64_t>(order.size()) < wanted) take();
  return order;
}

EpochSampler::RankOrder ShardRankOrder(ShardStream stream) {
  return [stream = std::move(stream)](int64_t epoch) { return ShardEpochOrder(stream, epoch); };
}

}  // namespace stoke::worker
