// Fans job events out to watchers. Events reach the hub only after the store holds them;
// the hub keeps the newest of each live job in memory so that watchers keeping up never
// touch the store, while one that lags or reconnects from an old sequence number reads
// its backlog from the store. Watchers pull (Read from their own position), so a slow or
// stalled watcher holds no buffer here and never slows the job or the other watchers.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "server/store/job_store.h"
#include "stoke/v1/job.pb.h"

namespace stoke::server {

class EventHub {
 public:
  struct Options {
    // Newest events kept in memory per job.
    size_t events_per_job = 4096;
    // Finished jobs whose events stay cached (watchers of a just-finished job).
    size_t finished_jobs_cached = 64;
  };

  struct ReadResult {
    std::vector<v1::JobEvent> events;
    // The job has finished and the caller has now been given its last event.
    bool end_of_stream = false;
  };

  using Listener = std::function<void()>;

  EventHub(JobStore& store, Options options);
  explicit EventHub(JobStore& store) : EventHub(store, Options()) {}

  // Called with events already committed to the store, in sequence order. `terminal`
  // says the job has reached a final state with these events.
  void Publish(const std::string& job_id, absl::Span<const v1::JobEvent> events, bool terminal);

  // Events with seq >= from_seq, at most max_events. NOT_FOUND for an unknown job.
  absl::StatusOr<ReadResult> Read(const std::string& job_id, uint64_t from_seq,
                                  uint32_t max_events);

  // `listener` runs (on the publishing thread) whenever new events for the job arrive.
  // It must not block; it typically resumes a stream that had nothing to send.
  uint64_t Subscribe(const std::string& job_id, Listener listener);
  // After this returns the listener is not running and will not run again.
  void Unsubscribe(uint64_t subscription);

 private:
  struct JobEvents {
    std::deque<v1::JobEvent> events;
    uint64_t last_seq = 0;
    bool terminal = false;
  };
  struct Subscription {
    std::mutex mu;
    bool active = true;
    Listener listener;
  };

  JobStore& store_;
  const Options options_;

  std::mutex mu_;
  std::unordered_map<std::string, JobEvents> cache_;
  std::deque<std::string> finished_;  // oldest first, for eviction
  std::unordered_map<std::string, std::map<uint64_t, std::shared_ptr<Subscription>>> listeners_;
  std::unordered_map<uint64_t, std::string> subscription_jobs_;
  uint64_t next_subscription_ = 1;
};

bool IsTerminal(v1::JobState state);

}  // namespace stoke::server
