// Which samples make up each batch: every epoch a fresh permutation of the data set
// (seeded by the job's seed and the epoch, so runs repeat and resumes continue exactly),
// split across ranks without overlap (PyTorch's DistributedSampler with set_epoch), cut
// into whole batches (drop_last: shapes stay constant). Its own shuffle, not torch's, so
// the order is the same on every LibTorch version. A data set read as streams (tar
// shards) gives its own order per rank and epoch instead (RankOrder); the batching, the
// caching of orders and the exact resume are the same.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

namespace stoke::worker {

class EpochSampler {
 public:
  // This rank's samples in one epoch, in the order it takes them.
  using RankOrder = std::function<std::vector<int64_t>(int64_t epoch)>;

  EpochSampler(int64_t dataset_size, int64_t batch_size, uint64_t seed, int rank, int world_size,
               bool shuffle);
  // An order of the caller's (shards streamed through a shuffle buffer, shard_order.h):
  // `per_rank` samples an epoch, at least, from `order`.
  EpochSampler(int64_t per_rank, int64_t batch_size, RankOrder order);

  // Whole batches per epoch on this rank.
  int64_t batches_per_epoch() const { return batches_per_epoch_; }
  // Sample indices of global batch number `batch` (epoch = batch / batches_per_epoch).
  // Thread-safe: it derives everything from the arguments.
  std::vector<int64_t> Batch(int64_t batch) const;

 private:
  // The epoch's order, computed once for all the loader threads that ask.
  std::shared_ptr<const std::vector<int64_t>> OrderOf(int64_t epoch) const;

  int64_t batch_size_;
  int64_t per_rank_;
  int64_t batches_per_epoch_;
  RankOrder rank_order_;
  // The two most recent epochs' orders: loader threads a batch apart may straddle an
  // epoch's end, and each must not recompute the permutation per batch.
  mutable std::mutex orders_mutex_;
  mutable std::shared_ptr<const std::vector<int64_t>> orders_[2];
  mutable int64_t order_epochs_[2] = {-1, -1};
};

}  // namespace stoke::worker
