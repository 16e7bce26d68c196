// The coordinator's scheduling pass: what the scheduler plans is stored, then assigned to
// the workers; and why queued jobs still wait.
#include "server/core/coordinator.h"

#include <spdlog/spdlog.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "security/token_hash.h"
#include "server/common/time_util.h"
#include "spec/code_bundle.h"

namespace stoke::server {

void Coordinator::Schedule() {
  if (shutting_down_) return;
  const absl::Time now = clock_.Now();
  const DeviceCapacity capacity = workers_.Capacity();
  const auto quota_use = options_.quotas.Use(HeldByRunningJobs());
  std::vector<QueuedJob> queue;
  std::map<std::string, std::string> held;  // owners over their disk quota wait
  for (const v1::Job* job : jobs_.Active()) {
    if (!IsQueued(job->state())) continue;
    if (auto over = OverDiskQuota(job->owner())) {
      held[job->id()] = *over;
      continue;
    }
    QueuedJob q;
    q.id = job->id();
    q.priority = job->spec().resources().priority();
    q.order = std::stoull(job->id());
    q.devices = job->spec().resources().gpus();
    q.kind = job->spec().resources().device();
    q.queued_since = FromProto(job->queue_time());
    q.owner = job->owner();
    q.owner_use = fair_share_.Use(q.owner, now);
    if (const QuotaGroup* group = options_.quotas.GroupOf(q.owner)) q.group = group->name;
    q.within_guarantee = options_.quotas.WithinGuarantee(
        quota_use, q.owner, Scheduler::ResolveType(q.kind, capacity), q.devices);
    queue.push_back(std::move(q));
  }
  if (queue.empty()) {
    PublishWaiting(std::move(held), {});
    return;
  }
  SchedulePlan plan = scheduler_.Plan(queue, workers_.FreeDevices(), capacity, now);
  std::vector<QueuedJob> waiting;
  for (QueuedJob& job : queue) {
    if (plan.waiting.count(job.id) > 0) waiting.push_back(std::move(job));
  }
  scheduler_.Order(waiting, now);
  const DeviceCapacity free = FreeAfter(plan.starts);
  PreemptForWaiting(waiting, free);
  auto predictions = PredictQueue(waiting, plan.starts, free, now);
  plan.waiting.merge(held);
  PublishWaiting(std::move(plan.waiting), std::move(predictions));
  if (plan.starts.empty()) return;
  // Every placement of the pass in one transaction; each is durable before any worker
  // hears of it.
  std::vector<JobBook::Change> changes;
  std::set<std::string> rendezvous_taken;  // this pass's, not yet in the job book
  std::vector<std::vector<std::string>> task_keys(plan.starts.size());
  for (size_t i = 0; i < plan.starts.size(); ++i) {
    changes.push_back(Placement(plan.starts[i], rendezvous_taken, task_keys[i]));
  }
  const std::vector<absl::Status> results = jobs_.TransitionTogether(changes);
  for (size_t i = 0; i < plan.starts.size(); ++i) {
    if (!results[i].ok()) {
      spdlog::error("job {} could not be scheduled: {}", plan.starts[i].job_id,
                    results[i].ToString());
      continue;
    }
    StartJob(plan.starts[i], task_keys[i]);
  }
}

JobBook::Change Coordinator::Placement(const PlannedStart& start,
                                       std::set<std::string>& rendezvous_taken,
                                       std::vector<std::string>& task_keys) {
  // Ranks meet at rank 0's worker, on a port no other live job holds.
  std::string rendezvous;
  if (start.worker_ids.size() > 1) {
    rendezvous = RendezvousAddress(workers_.Find(start.worker_ids.front())->info.address(),
                                   rendezvous_taken);
    rendezvous_taken.insert(rendezvous);
  }
  std::vector<v1::Placement> placement;
  for (size_t rank = 0; rank < start.worker_ids.size(); ++rank) {
    const WorkerEntry* worker = workers_.Find(start.worker_ids[rank]);
    v1::Placement& p = placement.emplace_back();
    p.set_rank(static_cast<uint32_t>(rank));
    p.set_worker_id(worker->info.id());
    p.set_host(worker->info.host());
    *p.mutable_device() = worker->info.device();
    // Without the system's random source there is no key: the id is then unguarded.
    auto key = security::NewToken();
    task_keys.push_back(key.ok() ? *key : "");
    if (key.ok()) p.set_task_key_sha256(security::HashToken(*key));
  }
  return {start.job_id, v1::JOB_STATE_SCHEDULED,
          absl::StrCat("scheduled on ", absl::StrJoin(start.worker_ids, ", ")),
          [rendezvous, placement = std::move(placement)](v1::Job& j) {
            j.set_attempt(j.attempt() + 1);
            j.clear_startup();  // the new attempt's, once it has stepped
            j.set_rendezvous_address(rendezvous);
            j.clear_placement();
            for (const auto& p : placement) *j.add_placement() = p;
          }};
}

void Coordinator::StartJob(const PlannedStart& start, const std::vector<std::string>& task_keys) {
  const std::string where = absl::StrJoin(start.worker_ids, ", ");
  const v1::Job* job = jobs_.FindActive(start.job_id);
  attempts_.insert_or_assign(
      job->id(),
      Attempt(job->attempt(), static_cast<uint32_t>(start.worker_ids.size()), clock_.Now()));
  spdlog::info("job {} attempt {} scheduled on {}", job->id(), job->attempt(), where);
  v1::CodeBundle code;
  if (const std::string digest = spec::CodeDigestOf(job->spec()); !digest.empty()) {
    auto stored = store_.GetCode(digest);
    // Without it the trainer fails the attempt, saying the code is missing.
    if (!stored.ok() || !code.ParseFromString(*stored)) {
      spdlog::error("job {}: its code (sha256 {}) cannot be read from the store: {}", job->id(),
                    digest, stored.ok() ? "unparsable" : stored.status().ToString());
      code.Clear();
    }
  }
  for (size_t rank = 0; rank < start.worker_ids.size(); ++rank) {
    WorkerEntry* worker = workers_.Find(start.worker_ids[rank]);
    workers_.MarkBusy(worker->info.id(), job->id(), job->attempt(), static_cast<uint32_t>(rank));
    v1::CoordinatorMessage message;
    v1::Assignment* a = message.mutable_assignment();
    a->set_job_id(job->id());
    a->set_attempt(job->attempt());
    *a->mutable_spec() = job->spec();
    auto* checkpoint = a->mutable_spec()->mutable_checkpoint();
    checkpoint->set_min_interval_seconds(
        std::max(checkpoint->min_interval_seconds(), options_.min_checkpoint_seconds));
    a->set_rank(static_cast<uint32_t>(rank));
    a->set_world_size(static_cast<uint32_t>(start.worker_ids.size()));
    a->set_job_dir(absl::StrCat(options_.jobs_dir, "/", job->id()));
    a->set_owner(job->owner());
    a->set_rendezvous_address(job->rendezvous_address());
    a->set_advertise_address(worker->info.address());
    a->set_task_key(task_keys[rank]);
    for (const auto& root : options_.data_roots) a->add_data_roots(root);
    if (code.files_size() > 0) *a->mutable_code() = code;
    worker->connection->Send(message);
  }
}

std::string Coordinator::RendezvousAddress(const std::string& host, std::set<std::string> taken) {
  for (const v1::Job* job : jobs_.Active()) {
    if (IsLive(job->state()) && !job->rendezvous_address().empty()) {
      taken.insert(job->rendezvous_address());
    }
  }
  const int span = options_.last_rendezvous_port - options_.first_rendezvous_port + 1;
  // IPv6 literals need brackets before the port.
  const std::string prefix =
      host.find(':') != std::string::npos ? absl::StrCat("[", host, "]") : host;
  std::string candidate;
  for (int i = 0; i < span; ++i) {
    const int port = options_.first_rendezvous_port + (next_rendezvous_port_++ % span);
    candidate = absl::StrCat(prefix, ":", port);
    if (!taken.count(candidate)) break;
  }
  return candidate;
}

DeviceCapacity Coordinator::FreeAfter(const std::vector<PlannedStart>& starts) {
  DeviceCapacity free;
  for (const FreeDevice& device : workers_.FreeDevices()) ++free[device.type];
  for (const PlannedStart& start : starts) {
    for (const std::string& worker_id : start.worker_ids) {
      if (const WorkerEntry* worker = workers_.Find(worker_id)) {
        --free[worker->info.device().type()];
      }
    }
  }
  return free;
}

void Coordinator::PublishWaiting(std::map<std::string, std::string> reasons,
                                 std::map<std::string, StartPrediction> predictions) {
  auto shared =
      std::make_shared<const QueueView>(QueueView{std::move(reasons), std::move(predictions)});
  std::lock_guard<std::mutex> lock(waiting_mu_);
  waiting_ = std::move(shared);
}

v1::Job Coordinator::WithWaitingReason(v1::Job job) const {
  if (!IsQueued(job.state())) return job;
  std::shared_ptr<const QueueView> waiting;
  {
    std::lock_guard<std::mutex> lock(waiting_mu_);
    waiting = waiting_;
  }
  if (auto it = waiting->reasons.find(job.id()); it != waiting->reasons.end()) {
    job.set_message(job.message().empty() ? it->second
                                          : absl::StrCat(job.message(), "; ", it->second));
  }
  if (auto it = waiting->predictions.find(job.id()); it != waiting->predictions.end()) {
    job.set_queue_position(it->second.position);
    if (it->second.start) *job.mutable_predicted_start_time() = ToProto(*it->second.start);
  }
  return job;
}

}  // namespace stoke::server
