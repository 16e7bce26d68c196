#include "worker/data/loader.h"

#include <chrono>

namespace stoke::worker {

BatchLoader::BatchLoader(std::shared_ptr<const Dataset> dataset, BatchPrep prep,
                         const Options& options)
    : dataset_(std::move(dataset)),
      prep_(std::move(prep)),
      options_(options),
      sampler_(options.order
                   ? EpochSampler(options.order_per_rank, options.batch_size, options.order)
                   : EpochSampler(dataset_->size(), options.batch_size, options.seed, options.rank,
                                  options.world_size, options.shuffle)),
      copier_(DeviceCopier::Create(options.device)),
      num_threads_(std::max(1, options.threads)),
      next_(options.start_batch),
      released_(options.start_batch) {
  const bool pinned = options.pin_memory && options.device.is_cuda();
  slots_.resize(static_cast<size_t>(num_threads_ + std::max(1, options.prefetch)));
  for (auto& slot : slots_) {
    slot.inputs = dataset_->NewInputs(options.batch_size, pinned);
    slot.targets = dataset_->NewTargets(options.batch_size, pinned);
  }
  for (int k = 0; k < num_threads_; ++k) threads_.emplace_back([this, k] { Produce(k); });
}

BatchLoader::~BatchLoader() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
  // Copies may still read the pinned buffers; they must finish before those are freed.
  for (auto& slot : slots_) {
    if (slot.fence) slot.fence->Wait();
  }
}

void BatchLoader::Produce(int thread_index) {
  const int64_t threads = num_threads_;
  const int64_t ring = static_cast<int64_t>(slots_.size());
  try {
    for (int64_t batch = options_.start_batch + thread_index;; batch += threads) {
      Slot& slot = slots_[static_cast<size_t>(batch % ring)];
      std::unique_ptr<CopyFence> fence;
      {
        std::unique_lock<std::mutex> lock(mu_);
        // The slot is free once the batch that last used it has been taken.
        cv_.wait(lock, [&] { return stopping_ || batch < released_ + ring; });
        if (stopping_) return;
        fence = std::move(slot.fence);
      }
      if (fence) fence->Wait();  // its last copy to the device has finished reading
      const std::vector<int64_t> indices = sampler_.Batch(batch);
      const int64_t epoch = batch / sampler_.batches_per_epoch();
      for (size_t row = 0; row < indices.size(); ++row) {
        dataset_->Fill(indices[row], epoch, static_cast<int64_t>(row), slot.inputs, slot.targets);
      }
      {
        std::lock_guard<std::mutex> lock(mu_);
        slot.batch = batch;
        slot.ready = true;
      }
      cv_.notify_all();
    }
  } catch (...) {
    std::lock_guard<std::mutex> lock(mu_);
    error_ = std::current_exception();
    cv_.notify_all();
  }
}

Batch BatchLoader::Next() {
  const int64_t batch = next_;
  Slot& slot = slots_[static_cast<size_t>(batch % static_cast<int64_t>(slots_.size()))];
  {
    std::unique_lock<std::mutex> lock(mu_);
    const auto began = std::chrono::steady_clock::now();
    cv_.wait(lock, [&] { return error_ || (slot.ready && slot.batch == batch); });
    wait_seconds_ +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
    if (error_) std::rethrow_exception(error_);
  }
  DeviceCopier::Copied copied = copier_->Copy(slot.inputs, slot.targets);
  {
    std::lock_guard<std::mutex> lock(mu_);
    slot.ready = false;
    slot.fence = std::move(copied.fence);
    released_ = batch + 1;
    next_ = batch + 1;
  }
  cv_.notify_all();
  return prep_(copied.inputs, copied.targets, /*train=*/true);
}

double BatchLoader::TakeWaitSeconds() {
  std::lock_guard<std::mutex> lock(mu_);
  const double seconds = wait_seconds_;
  wait_seconds_ = 0;
  return seconds;
}

}  // namespace stoke::worker
