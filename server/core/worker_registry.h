// The attached workers: one device each, what it runs, when it was last heard from.
// Not thread-safe: the Coordinator calls it under its own lock.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "server/core/scheduler.h"
#include "server/core/worker_connection.h"
#include "stoke/v1/coordinator.pb.h"

namespace stoke::server {

struct WorkerEntry {
  v1::Worker info;  // state, job_id and rank kept current
  std::shared_ptr<WorkerConnection> connection;
  uint32_t attempt = 0;  // attempt of info.job_id() it runs or drains
  absl::Time last_seen;
  // Shutting down once its task has stopped: given no more work.
  bool leaving = false;
};

class WorkerRegistry {
 public:
  // Adds the worker as IDLE. Returns the entry it replaces when one with the same id was
  // attached (that process is presumed gone; its job must be dealt with by the caller).
  std::optional<WorkerEntry> Attach(v1::Worker info, std::shared_ptr<WorkerConnection> connection,
                                    absl::Time now);
  // Removes the worker if `connection` is still the one it is attached through (a stale
  // stream closing after a re-registration must not remove the new one).
  std::optional<WorkerEntry> Detach(const std::string& worker_id,
                                    const WorkerConnection* connection);

  WorkerEntry* Find(const std::string& worker_id);
  void Touch(const std::string& worker_id, absl::Time now);

  void MarkBusy(const std::string& worker_id, const std::string& job_id, uint32_t attempt,
                uint32_t rank);
  void MarkDraining(const std::string& worker_id);
  void MarkIdle(const std::string& worker_id);
  void MarkLeaving(const std::string& worker_id);

  // Idle workers that are not leaving, and the devices of all that are not leaving.
  std::vector<FreeDevice> FreeDevices() const;
  DeviceCapacity Capacity() const;
  // Counts every worker as heard from at `now` (after the coordinator itself stood still).
  void ForgiveSilence(absl::Time now);
  // Workers not heard from for longer than `timeout`.
  std::vector<std::string> Silent(absl::Time now, absl::Duration timeout) const;
  // Workers holding (running or draining) this job.
  std::vector<std::string> WorkersOf(const std::string& job_id) const;
  std::vector<v1::Worker> List() const;

 private:
  std::map<std::string, WorkerEntry> workers_;
};

}  // namespace stoke::server
