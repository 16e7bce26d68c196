#include "server/core/event_hub.h"

#include <algorithm>

namespace stoke::server {

bool IsTerminal(v1::JobState state) {
  return state == v1::JOB_STATE_SUCCEEDED || state == v1::JOB_STATE_FAILED ||
         state == v1::JOB_STATE_CANCELLED;
}

EventHub::EventHub(JobStore& store, Options options) : store_(store), options_(options) {}

void EventHub::Publish(const std::string& job_id, absl::Span<const v1::JobEvent> events,
                       bool terminal) {
  std::vector<std::shared_ptr<Subscription>> to_notify;
  {
    std::lock_guard<std::mutex> lock(mu_);
    JobEvents& cached = cache_[job_id];
    for (const auto& event : events) {
      cached.events.push_back(event);
      cached.last_seq = event.seq();
    }
    while (cached.events.size() > options_.events_per_job) cached.events.pop_front();
    if (terminal && !cached.terminal) {
      cached.terminal = true;
      finished_.push_back(job_id);
      while (finished_.size() > options_.finished_jobs_cached) {
        cache_.erase(finished_.front());
        finished_.pop_front();
      }
    }
    if (auto it = listeners_.find(job_id); it != listeners_.end()) {
      for (auto& [id, sub] : it->second) to_notify.push_back(sub);
    }
  }
  // Outside mu_: a listener reads from the hub.
  for (auto& sub : to_notify) {
    std::lock_guard<std::mutex> lock(sub->mu);
    if (sub->active) sub->listener();
  }
}

absl::StatusOr<EventHub::ReadResult> EventHub::Read(const std::string& job_id, uint64_t from_seq,
                                                    uint32_t max_events) {
  from_seq = std::max<uint64_t>(from_seq, 1);
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = cache_.find(job_id);
    if (it != cache_.end() && !it->second.events.empty() &&
        from_seq >= it->second.events.front().seq()) {
      const JobEvents& cached = it->second;
      ReadResult result;
      size_t start = from_seq - cached.events.front().seq();
      for (size_t i = start; i < cached.events.size() && result.events.size() < max_events; ++i) {
        result.events.push_back(cached.events[i]);
      }
      uint64_t delivered_through =
          result.events.empty() ? from_seq - 1 : result.events.back().seq();
      result.end_of_stream = cached.terminal && delivered_through >= cached.last_seq;
      return result;
    }
  }
  // Not cached (an old job, or a position older than the cache): the store has it all.
  // The job is read first, so a final state seen here covers every event read after.
  auto job = store_.GetJob(job_id);
  if (!job.ok()) return job.status();
  auto events = store_.ReadEvents(job_id, from_seq, max_events);
  if (!events.ok()) return events.status();
  ReadResult result;
  result.events = *std::move(events);
  uint64_t delivered_through = result.events.empty() ? from_seq - 1 : result.events.back().seq();
  result.end_of_stream = IsTerminal(job->state()) && delivered_through >= job->last_event_seq();
  return result;
}

uint64_t EventHub::Subscribe(const std::string& job_id, Listener listener) {
  auto sub = std::make_shared<Subscription>();
  sub->listener = std::move(listener);
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t id = next_subscription_++;
  listeners_[job_id][id] = std::move(sub);
  subscription_jobs_[id] = job_id;
  return id;
}

void EventHub::Unsubscribe(uint64_t subscription) {
  std::shared_ptr<Subscription> sub;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto job = subscription_jobs_.find(subscription);
    if (job == subscription_jobs_.end()) return;
    auto& subs = listeners_[job->second];
    sub = subs[subscription];
    subs.erase(subscription);
    if (subs.empty()) listeners_.erase(job->second);
    subscription_jobs_.erase(job);
  }
  // Waits for a listener call in flight on another thread.
  std::lock_guard<std::mutex> lock(sub->mu);
  sub->active = false;
}

}  // namespace stoke::server
