// The data pipeline the seed guides ask for, in C++: N loader threads assemble batches
// (sampler order, bytes copied out of the data set) into a ring of reusable, page-locked
// host buffers, ahead of the training loop; the loop takes them in order, has each copied
// to the device on a copy stream, and prepares it there (BatchPrep). Threads live as long
// as the loader, across epochs. How long the loop had to wait for a batch is measured.
#pragma once

#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "worker/data/batch_prep.h"
#include "worker/data/batch_source.h"
#include "worker/data/dataset.h"
#include "worker/data/device_copy.h"
#include "worker/data/epoch_sampler.h"

namespace stoke::worker {

class BatchLoader final : public BatchSource {
 public:
  struct Options {
    int64_t batch_size = 256;
    int threads = 2;
    int prefetch = 4;
    bool pin_memory = true;  // only honoured for CUDA devices
    bool shuffle = true;
    uint64_t seed = 1;
    int rank = 0;
    int world_size = 1;
    // The first global batch to produce (a resumed job continues where it stopped).
    int64_t start_batch = 0;
    torch::Device device = torch::kCPU;
    // The samples' order, when not a permutation of the whole set (data.shards' streams,
    // shard_order.h): this rank's order of an epoch, `order_per_rank` samples long.
    EpochSampler::RankOrder order;
    int64_t order_per_rank = 0;
  };

  // Throws std::invalid_argument when a batch does not fit in the data set.
  BatchLoader(std::shared_ptr<const Dataset> dataset, BatchPrep prep, const Options& options);
  ~BatchLoader() override;

  Batch Next() override;
  int64_t BatchesPerEpoch() const override { return sampler_.batches_per_epoch(); }
  DataShape Shape() const override { return dataset_->Shape(); }
  double TakeWaitSeconds() override;
  int64_t SkippedSamples() const override { return dataset_->SkippedSamples(); }
  // Next() prepares batches on the calling thread, so this needs no lock.
  void SetImagesChannelsLast(bool on) override { prep_.set_channels_last(on); }

  const EpochSampler& sampler() const { return sampler_; }

 private:
  struct Slot {
    torch::Tensor inputs;
    torch::Tensor targets;
    int64_t batch = -1;
    bool ready = false;
    std::unique_ptr<CopyFence> fence;  // the last copy out of these buffers
  };

  void Produce(int thread_index);

  std::shared_ptr<const Dataset> dataset_;
  BatchPrep prep_;
  Options options_;
  EpochSampler sampler_;
  std::unique_ptr<DeviceCopier> copier_;
  int num_threads_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Slot> slots_;
  int64_t next_;      // the batch Next() returns next
  int64_t released_;  // batches before this one have left their slots
  bool stopping_ = false;
  std::exception_ptr error_;
  double wait_seconds_ = 0;
  std::vector<std::thread> threads_;
};

}  // namespace stoke::worker
