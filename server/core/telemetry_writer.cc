#include "server/core/telemetry_writer.h"

#include <spdlog/spdlog.h>

namespace stoke::server {

absl::StatusOr<std::unique_ptr<TelemetryWriter>> TelemetryWriter::Create(Options options,
                                                                         JobStore& store,
                                                                         EventHub& hub) {
  if (options.max_queued_events == 0 || options.max_batch_events == 0) {
    return absl::InvalidArgumentError("telemetry queue and batch sizes must be positive");
  }
  return std::unique_ptr<TelemetryWriter>(new TelemetryWriter(options, store, hub));
}

TelemetryWriter::~TelemetryWriter() { Stop(); }

void TelemetryWriter::Start() {
  std::lock_guard<std::mutex> lock(mu_);
  if (thread_.joinable()) return;
  stopping_ = false;
  thread_ = std::thread([this] { Loop(); });
}

void TelemetryWriter::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!thread_.joinable()) return;
    stopping_ = true;
  }
  work_cv_.notify_all();
  thread_.join();
}

bool TelemetryWriter::HasRoom(size_t events) {
  std::lock_guard<std::mutex> lock(mu_);
  return queued_events_ + events <= options_.max_queued_events;
}

void TelemetryWriter::CountDropped(size_t events) {
  std::lock_guard<std::mutex> lock(mu_);
  dropped_ += events;
}

void TelemetryWriter::Append(const v1::Job& job, std::vector<v1::JobEvent> events) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queued_events_ += events.size();
    queue_.push_back({job, std::move(events)});
  }
  work_cv_.notify_one();
}

std::vector<JobUpdate> TelemetryWriter::Take(const std::string& job_id) {
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [&] { return writing_.count(job_id) == 0; });
  std::vector<JobUpdate> taken;
  size_t events = 0;
  for (auto it = queue_.begin(); it != queue_.end();) {
    if (it->job.id() != job_id) {
      ++it;
      continue;
    }
    events += it->events.size();
    taken.push_back(std::move(*it));
    it = queue_.erase(it);
  }
  queued_events_ -= events;
  return taken;
}

void TelemetryWriter::GiveBack(std::vector<JobUpdate> updates) {
  if (updates.empty()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = updates.rbegin(); it != updates.rend(); ++it) {
      queued_events_ += it->events.size();
      queue_.push_front(std::move(*it));
    }
  }
  work_cv_.notify_one();
}

void TelemetryWriter::FlushAll() {
  std::unique_lock<std::mutex> lock(mu_);
  if (!thread_.joinable()) return;
  done_cv_.wait(lock, [&] { return queue_.empty() && writing_.empty(); });
}

uint64_t TelemetryWriter::dropped() {
  std::lock_guard<std::mutex> lock(mu_);
  return dropped_;
}

size_t TelemetryWriter::queued() {
  std::lock_guard<std::mutex> lock(mu_);
  return queued_events_;
}

void TelemetryWriter::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    work_cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, and everything is written
    // Everything gathered while the previous batch was written goes in this one: the
    // slower the disk, the larger the batches, and the fewer the syncs.
    std::vector<JobUpdate> batch;
    size_t events = 0;
    while (!queue_.empty() &&
           (batch.empty() || events + queue_.front().events.size() <= options_.max_batch_events)) {
      events += queue_.front().events.size();
      writing_.insert(queue_.front().job.id());
      batch.push_back(std::move(queue_.front()));
      queue_.pop_front();
    }
    lock.unlock();
    const absl::Status s = store_.CommitBatch(batch);
    if (s.ok()) {
      if (failing_) spdlog::info("the store takes metric and log events again");
      failing_ = false;
      for (const auto& update : batch) {
        hub_.Publish(update.job.id(), update.events, /*terminal=*/false);
      }
    }
    lock.lock();
    if (!s.ok() && !stopping_) {
      // Back at the head of the queue, in order, to be tried again; meanwhile new reports
      // fill the queue and, once it is full, are dropped before they are numbered.
      if (!failing_) {
        spdlog::error("{} metric and log events not stored: {}; trying again every {}", events,
                      s.ToString(), absl::FormatDuration(options_.retry_interval));
      }
      failing_ = true;
      for (auto it = batch.rbegin(); it != batch.rend(); ++it) queue_.push_front(std::move(*it));
      writing_.clear();
      done_cv_.notify_all();
      work_cv_.wait_for(lock, absl::ToChronoMilliseconds(options_.retry_interval),
                        [this] { return stopping_; });
      continue;
    }
    if (!s.ok()) {
      // Stopping with a store that refuses them: lost, and never shown to a watcher.
      spdlog::error("{} metric and log events not stored: {}", events, s.ToString());
      dropped_ += events;
    }
    queued_events_ -= events;
    writing_.clear();
    done_cv_.notify_all();
  }
}

}  // namespace stoke::server
