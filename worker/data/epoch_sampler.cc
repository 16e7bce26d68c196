#include "worker/data/epoch_sampler.h"

#include <numeric>
#include <random>
#include <stdexcept>
#include <string>

namespace stoke::worker {

namespace {

// Every rank's share of one epoch's order of the whole set: rank r takes positions r,
// r + world, r + 2*world, ... of a permutation all ranks agree on.
std::vector<int64_t> StridedShare(int64_t size, uint64_t seed, int rank, int world_size,
                                  bool shuffle, int64_t per_rank, int64_t epoch) {
  std::vector<int64_t> order(static_cast<size_t>(size));
  std::iota(order.begin(), order.end(), 0);
  if (shuffle) {
    // Fisher-Yates with a generator seeded by (seed, epoch): all ranks agree on the order.
    std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(epoch) + 1);
    for (int64_t i = size - 1; i > 0; --i) {
      std::uniform_int_distribution<int64_t> pick(0, i);
      std::swap(order[static_cast<size_t>(i)], order[static_cast<size_t>(pick(rng))]);
    }
  }
  std::vector<int64_t> share(static_cast<size_t>(per_rank));
  for (int64_t i = 0; i < per_rank; ++i) {
    share[static_cast<size_t>(i)] = order[static_cast<size_t>(i * world_size + rank)];
  }
  return share;
}

}  // namespace

EpochSampler::EpochSampler(int64_t dataset_size, int64_t batch_size, uint64_t seed, int rank,
                           int world_size, bool shuffle)
    // Every rank gets the same number of samples; the remainder of an uneven split is
    // left out of that epoch (a different remainder each epoch when shuffling).
    : EpochSampler(dataset_size / world_size, batch_size,
                   [=, per_rank = dataset_size / world_size](int64_t epoch) {
                     return StridedShare(dataset_size, seed, rank, world_size, shuffle, per_rank,
                                         epoch);
                   }) {}

EpochSampler::EpochSampler(int64_t per_rank, int64_t batch_size, RankOrder order)
    : batch_size_(batch_size),
      per_rank_(per_rank),
      batches_per_epoch_(per_rank / batch_size),
      rank_order_(std::move(order)) {
  if (batches_per_epoch_ == 0) {
    throw std::invalid_argument("training.batch_size: " + std::to_string(batch_size_) +
                                " is larger than the " + std::to_string(per_rank_) +
                                " training samples each rank gets");
  }
}

std::shared_ptr<const std::vector<int64_t>> EpochSampler::OrderOf(int64_t epoch) const {
  const std::lock_guard<std::mutex> lock(orders_mutex_);
  for (int i = 0; i < 2; ++i) {
    if (order_epochs_[i] == epoch) return orders_[i];
  }
  // Replaces the older of the two.
  const int slot = order_epochs_[0] < order_epochs_[1] ? 0 : 1;
  orders_[slot] = std::make_shared<const std::vector<int64_t>>(rank_order_(epoch));
  order_epochs_[slot] = epoch;
  return orders_[slot];
}

std::vector<int64_t> EpochSampler::Batch(int64_t batch) const {
  const int64_t epoch = batch / batches_per_epoch_;
  const int64_t within = batch % batches_per_epoch_;
  const std::shared_ptr<const std::vector<int64_t>> order_of_epoch = OrderOf(epoch);
  const std::vector<int64_t>& order = *order_of_epoch;
  std::vector<int64_t> indices(static_cast<size_t>(batch_size_));
  for (int64_t i = 0; i < batch_size_; ++i) {
    indices[static_cast<size_t>(i)] = order[static_cast<size_t>(within * batch_size_ + i)];
  }
  return indices;
}

}  // namespace stoke::worker
