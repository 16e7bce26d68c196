#include "server/core/worker_registry.h"

#include "server/common/time_util.h"

namespace stoke::server {

std::optional<WorkerEntry> WorkerRegistry::Attach(v1::Worker info,
                                                  std::shared_ptr<WorkerConnection> connection,
                                                  absl::Time now) {
  std::optional<WorkerEntry> replaced;
  if (auto it = workers_.find(info.id()); it != workers_.end()) {
    replaced = std::move(it->second);
    workers_.erase(it);
  }
  info.set_state(v1::WORKER_STATE_IDLE);
  info.clear_job_id();
  info.set_rank(0);
  *info.mutable_attach_time() = ToProto(now);
  *info.mutable_last_heartbeat() = ToProto(now);
  WorkerEntry entry{std::move(info), std::move(connection), 0, now};
  std::string id = entry.info.id();
  workers_.emplace(std::move(id), std::move(entry));
  return replaced;
}

std::optional<WorkerEntry> WorkerRegistry::Detach(const std::string& worker_id,
                                                  const WorkerConnection* connection) {
  auto it = workers_.find(worker_id);
  if (it == workers_.end() || it->second.connection.get() != connection) return std::nullopt;
  WorkerEntry entry = std::move(it->second);
  workers_.erase(it);
  return entry;
}

WorkerEntry* WorkerRegistry::Find(const std::string& worker_id) {
  auto it = workers_.find(worker_id);
  return it == workers_.end() ? nullptr : &it->second;
}

void WorkerRegistry::Touch(const std::string& worker_id, absl::Time now) {
  if (WorkerEntry* w = Find(worker_id)) {
    w->last_seen = now;
    *w->info.mutable_last_heartbeat() = ToProto(now);
  }
}

void WorkerRegistry::MarkBusy(const std::string& worker_id, const std::string& job_id,
                              uint32_t attempt, uint32_t rank) {
  if (WorkerEntry* w = Find(worker_id)) {
    w->info.set_state(v1::WORKER_STATE_BUSY);
    w->info.set_job_id(job_id);
    w->info.set_rank(rank);
    w->attempt = attempt;
  }
}

void WorkerRegistry::MarkDraining(const std::string& worker_id) {
  if (WorkerEntry* w = Find(worker_id)) w->info.set_state(v1::WORKER_STATE_DRAINING);
}

void WorkerRegistry::MarkLeaving(const std::string& worker_id) {
  if (WorkerEntry* w = Find(worker_id)) w->leaving = true;
}

void WorkerRegistry::MarkIdle(const std::string& worker_id) {
  if (WorkerEntry* w = Find(worker_id)) {
    w->info.set_state(v1::WORKER_STATE_IDLE);
    w->info.clear_job_id();
    w->info.set_rank(0);
    w->attempt = 0;
  }
}

std::vector<FreeDevice> WorkerRegistry::FreeDevices() const {
  std::vector<FreeDevice> free;
  for (const auto& [id, w] : workers_) {
    if (w.info.state() != v1::WORKER_STATE_IDLE || w.leaving) continue;
    free.push_back({id, w.info.host(), w.info.device().type(), w.info.device().index()});
  }
  return free;
}

DeviceCapacity WorkerRegistry::Capacity() const {
  DeviceCapacity capacity;
  for (const auto& [id, w] : workers_) {
    if (!w.leaving) ++capacity[w.info.device().type()];
  }
  return capacity;
}

void WorkerRegistry::ForgiveSilence(absl::Time now) {
  for (auto& [id, w] : workers_) w.last_seen = now;
}

std::vector<std::string> WorkerRegistry::Silent(absl::Time now, absl::Duration timeout) const {
  std::vector<std::string> silent;
  for (const auto& [id, w] : workers_) {
    if (now - w.last_seen > timeout) silent.push_back(id);
  }
  return silent;
}

std::vector<std::string> WorkerRegistry::WorkersOf(const std::string& job_id) const {
  std::vector<std::string> ids;
  for (const auto& [id, w] : workers_) {
    if (w.info.job_id() == job_id) ids.push_back(id);
  }
  return ids;
}

std::vector<v1::Worker> WorkerRegistry::List() const {
  std::vector<v1::Worker> list;
  for (const auto& [id, w] : workers_) list.push_back(w.info);
  return list;
}

}  // namespace stoke::server
