// Writes jobs' metric samples and log lines to the store off the scheduling path: callers
// queue them (never waiting on the disk) and one thread commits whatever has gathered in
// one transaction (group commit), then hands the events to watchers. Watchers get only
// what the store has taken: a batch the store refuses (a full or read-only disk) stays at
// the queue's head and is tried again, so no watcher sees an event under a number the
// store may later give another. The queue is
// bounded: what does not fit is dropped and counted, never waited for. State transitions
// do not come here; a job's transition takes that job's queued telemetry (Take) and
// commits it with its state change in one transaction, so the store and watchers see
// every job's events in sequence order without the transition waiting for a batch.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/core/event_hub.h"
#include "server/store/job_store.h"
#include "stoke/v1/job.pb.h"

namespace stoke::server {

class TelemetryWriter {
 public:
  struct Options {
    // Events queued and not yet written, at most; beyond, new ones are dropped.
    size_t max_queued_events = 200'000;
    // Events per transaction, at most.
    size_t max_batch_events = 20'000;
    // Wait before trying again a batch the store refused.
    absl::Duration retry_interval = absl::Seconds(1);
  };

  static absl::StatusOr<std::unique_ptr<TelemetryWriter>> Create(Options options, JobStore& store,
                                                                 EventHub& hub);
  ~TelemetryWriter();

  void Start();
  // Writes everything queued, then stops the thread.
  void Stop();

  // Whether `events` more would fit in the queue now. A caller that is told no drops them
  // (and calls CountDropped) before numbering them, so sequence numbers stay gapless.
  bool HasRoom(size_t events);
  void CountDropped(size_t events);
  // Queues `events` (numbered, after the job's earlier ones) with `job` as it is after
  // them. Never blocks on the disk.
  void Append(const v1::Job& job, std::vector<v1::JobEvent> events);
  // Removes the job's queued updates, in order, for the caller to commit (and publish)
  // itself; waits only while a batch holding some of the job's events is being written,
  // so that what it returns follows everything already stored and published. The caller
  // must keep the job's reports from being appended until it has committed them or given
  // them back (the Coordinator's lock does).
  std::vector<JobUpdate> Take(const std::string& job_id);
  // Puts back what Take returned, ahead of anything queued since, when the caller could
  // not commit it: the writer writes it as if it had never been taken.
  void GiveBack(std::vector<JobUpdate> updates);
  // Returns once everything queued has been written.
  void FlushAll();

  uint64_t dropped();
  size_t queued();

 private:
  TelemetryWriter(Options options, JobStore& store, EventHub& hub)
      : options_(options), store_(store), hub_(hub) {}
  void Loop();

  const Options options_;
  JobStore& store_;
  EventHub& hub_;

  std::mutex mu_;
  std::condition_variable work_cv_;  // the writer: something queued, or stopping
  std::condition_variable done_cv_;  // Take, FlushAll: a batch was written
  std::deque<JobUpdate> queue_;
  size_t queued_events_ = 0;
  // Jobs with events in the batch being written (Take waits for its job to leave).
  std::set<std::string> writing_;
  uint64_t dropped_ = 0;
  bool stopping_ = false;
  bool failing_ = false;  // the store refused the last batch
  std::thread thread_;
};

}  // namespace stoke::server
