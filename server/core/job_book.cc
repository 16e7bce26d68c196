#include "server/core/job_book.h"

#include "absl/strings/str_cat.h"
#include "server/common/time_util.h"
#include "server/core/log_budget.h"

namespace stoke::server {

bool IsQueued(v1::JobState state) {
  return state == v1::JOB_STATE_PENDING || state == v1::JOB_STATE_RESTARTING ||
         state == v1::JOB_STATE_PREEMPTED;
}

bool IsLive(v1::JobState state) {
  return state == v1::JOB_STATE_SCHEDULED || state == v1::JOB_STATE_RUNNING;
}

bool IsTransitionAllowed(v1::JobState from, v1::JobState to) {
  if (IsTerminal(from) || from == to) return false;
  switch (to) {
    case v1::JOB_STATE_PENDING:  // back to the queue through no fault of the job
      return from == v1::JOB_STATE_SCHEDULED || from == v1::JOB_STATE_RUNNING ||
             from == v1::JOB_STATE_RESTARTING;
    case v1::JOB_STATE_SCHEDULED:
      return IsQueued(from);
    case v1::JOB_STATE_RUNNING:
      return from == v1::JOB_STATE_SCHEDULED;
    case v1::JOB_STATE_RESTARTING:
    case v1::JOB_STATE_PREEMPTED:
      return from == v1::JOB_STATE_SCHEDULED || from == v1::JOB_STATE_RUNNING;
    case v1::JOB_STATE_SUCCEEDED:
      return from == v1::JOB_STATE_SCHEDULED || from == v1::JOB_STATE_RUNNING;
    case v1::JOB_STATE_FAILED:
    case v1::JOB_STATE_CANCELLED:
      return true;
    default:
      return false;
  }
}

std::string StateName(v1::JobState state) {
  std::string name = v1::JobState_Name(state);
  constexpr std::string_view kPrefix = "JOB_STATE_";
  if (name.rfind(kPrefix, 0) == 0) name = name.substr(kPrefix.size());
  return name;
}

absl::Status JobBook::Recover() {
  std::vector<v1::Job> unfinished;
  JobQuery query;
  query.states = {v1::JOB_STATE_PENDING, v1::JOB_STATE_SCHEDULED, v1::JOB_STATE_RUNNING,
                  v1::JOB_STATE_RESTARTING, v1::JOB_STATE_PREEMPTED};
  query.limit = 1000;
  for (;;) {
    auto page = store_.ListJobs(query);
    if (!page.ok()) return page.status();
    for (auto& job : page->jobs) unfinished.push_back(std::move(job));
    if (!page->more) break;
    query.before_id = std::stoull(unfinished.back().id());
  }
  for (auto& job : unfinished) {
    Show(job);
    active_[job.id()] = std::move(job);
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::Job> JobBook::Create(const v1::JobSpec& spec, const std::string& request_id,
                                        const std::string& owner, const v1::AuditEntry* audit) {
  const absl::Time now = clock_.Now();
  v1::Job job;
  *job.mutable_spec() = spec;
  job.set_request_id(request_id);
  job.set_owner(owner);
  job.set_state(v1::JOB_STATE_PENDING);
  *job.mutable_create_time() = ToProto(now);
  *job.mutable_queue_time() = ToProto(now);
  job.set_last_event_seq(1);
  v1::JobEvent event;
  event.set_seq(1);
  *event.mutable_time() = ToProto(now);
  event.mutable_state_change()->set_state(v1::JOB_STATE_PENDING);
  event.mutable_state_change()->set_message("submitted");
  auto stored = audit != nullptr ? store_.CreateAuditedJob(std::move(job), {event}, *audit)
                                 : store_.CreateJob(std::move(job), {event});
  if (!stored.ok()) return stored.status();
  active_[stored->id()] = *stored;
  Show(*stored);
  hub_.Publish(stored->id(), {event}, /*terminal=*/false);
  return stored;
}

const v1::Job* JobBook::FindActive(const std::string& id) const {
  auto it = active_.find(id);
  return it == active_.end() ? nullptr : &it->second;
}

std::vector<const v1::Job*> JobBook::Active() const {
  std::vector<const v1::Job*> jobs;
  for (const auto& [id, job] : active_) jobs.push_back(&job);
  return jobs;
}

absl::StatusOr<v1::Job> JobBook::Get(const std::string& id) const {
  if (const v1::Job* job = FindActive(id)) return *job;
  return store_.GetJob(id);
}

void JobBook::Show(const v1::Job& job) {
  auto copy = std::make_shared<const v1::Job>(job);
  std::lock_guard<std::mutex> lock(view_mu_);
  view_[job.id()] = std::move(copy);
}

void JobBook::Hide(const std::string& id) {
  std::lock_guard<std::mutex> lock(view_mu_);
  view_.erase(id);
}

absl::StatusOr<v1::Job> JobBook::Published(const std::string& id) const {
  std::shared_ptr<const v1::Job> job;
  {
    std::lock_guard<std::mutex> lock(view_mu_);
    if (auto it = view_.find(id); it != view_.end()) job = it->second;
  }
  if (job) return *job;
  // Finished (hidden only once the store holds its final row), or unknown.
  return store_.GetJob(id);
}

std::vector<v1::Job> JobBook::PublishedActive() const {
  std::vector<std::shared_ptr<const v1::Job>> shared;
  {
    std::lock_guard<std::mutex> lock(view_mu_);
    shared.reserve(view_.size());
    for (const auto& [id, job] : view_) shared.push_back(job);
  }
  std::vector<v1::Job> jobs;
  jobs.reserve(shared.size());
  for (const auto& job : shared) jobs.push_back(*job);
  return jobs;
}

absl::Status JobBook::Transition(const std::string& id, v1::JobState state,
                                 const std::string& message,
                                 const std::function<void(v1::Job&)>& edit) {
  return TransitionTogether({{id, state, message, edit}}).front();
}

std::vector<absl::Status> JobBook::TransitionTogether(const std::vector<Change>& changes) {
  std::vector<absl::Status> results(changes.size());
  std::vector<Prepared> prepared;
  std::vector<size_t> index;  // prepared[i] is changes[index[i]]
  const absl::Time now = clock_.Now();
  for (size_t i = 0; i < changes.size(); ++i) {
    const Change& c = changes[i];
    const v1::Job* current = FindActive(c.id);
    if (current == nullptr) {
      auto stored = store_.GetJob(c.id);
      results[i] =
          stored.ok()
              ? absl::FailedPreconditionError(absl::StrCat("job ", c.id, " has already finished (",
                                                           StateName(stored->state()), ")"))
              : stored.status();
      continue;
    }
    if (!IsTransitionAllowed(current->state(), c.state)) {
      results[i] = absl::FailedPreconditionError(absl::StrCat("job ", c.id, " cannot go from ",
                                                              StateName(current->state()), " to ",
                                                              StateName(c.state)));
      continue;
    }
    // The job's reports queued so far go to the store (and to watchers) with the change,
    // in its transaction: its events stay in sequence order, none is left behind a final
    // state, and the change waits for no telemetry batch but one holding this job's events.
    std::vector<JobUpdate> reports;
    if (telemetry_) reports = telemetry_->Take(c.id);
    v1::JobEvent event;
    event.mutable_state_change()->set_state(c.state);
    event.mutable_state_change()->set_message(c.message);
    prepared.push_back(Prepare(
        *current,
        [&](v1::Job& job) {
          if (c.edit) c.edit(job);
          job.set_state(c.state);
          job.set_message(c.message);
          if (IsQueued(c.state)) *job.mutable_queue_time() = ToProto(now);
          if (c.state == v1::JOB_STATE_SCHEDULED) *job.mutable_start_time() = ToProto(now);
          if (IsTerminal(c.state)) *job.mutable_end_time() = ToProto(now);
        },
        {event}, std::move(reports)));
    index.push_back(i);
  }
  const absl::Status stored = Store(prepared);
  for (size_t i = 0; i < prepared.size(); ++i) {
    results[index[i]] = stored;
    if (stored.ok()) Install(std::move(prepared[i]));
  }
  return results;
}

absl::Status JobBook::Amend(const std::string& id, const std::string& note,
                            const std::function<void(v1::Job&)>& edit) {
  const v1::Job* current = FindActive(id);
  if (current == nullptr) return absl::NotFoundError(absl::StrCat("job ", id, " is not active"));
  // Behind the job's queued reports, as a state change is (TransitionTogether).
  std::vector<JobUpdate> reports;
  if (telemetry_) reports = telemetry_->Take(id);
  v1::JobEvent event;
  event.mutable_log()->set_text(note);
  std::vector<Prepared> prepared;
  prepared.push_back(Prepare(*current, edit, {event}, std::move(reports)));
  if (auto s = Store(prepared); !s.ok()) return s;
  Install(std::move(prepared.front()));
  return absl::OkStatus();
}

absl::Status JobBook::AppendReport(const std::string& id, const v1::TaskReport& report,
                                   uint32_t rank, const v1::JobStartup* startup) {
  std::vector<v1::JobEvent> events;
  events.reserve(report.metrics_size() + report.logs_size());
  for (const auto& sample : report.metrics()) {
    v1::JobEvent& event = events.emplace_back();
    *event.mutable_metrics() = sample;
    event.mutable_metrics()->set_rank(rank);
  }
  for (const auto& line : report.logs()) {
    v1::JobEvent& event = events.emplace_back();
    *event.mutable_log() = line;
    event.mutable_log()->set_rank(rank);
  }
  if (events.empty() && startup == nullptr) {
    return absl::OkStatus();
  }
  uint64_t log_bytes = 0;
  for (const auto& line : report.logs()) log_bytes += LogLineBytes(line);
  auto latest = [&](v1::Job& job) {
    job.set_log_bytes(job.log_bytes() + log_bytes);
    if (startup != nullptr) {
      *job.mutable_startup() = *startup;
    }
    for (auto& p : *job.mutable_placement()) {
      if (p.rank() == rank && report.report_seq() > p.last_report_seq()) {
        p.set_last_report_seq(report.report_seq());
      }
    }
    if (rank != 0) return;
    for (const auto& sample : report.metrics()) {
      *(sample.has_eval() ? job.mutable_latest_eval() : job.mutable_latest_metrics()) = sample;
    }
  };
  if (telemetry_ == nullptr) return Commit(id, latest, std::move(events));
  auto it = active_.find(id);
  if (it == active_.end()) return absl::NotFoundError(absl::StrCat("job ", id, " is not active"));
  v1::Job& job = it->second;
  latest(job);
  if (!events.empty() && !telemetry_->HasRoom(events.size())) {
    // Numbered only once queued, so that the job's sequence has no holes.
    telemetry_->CountDropped(events.size());
    Show(job);
    return absl::ResourceExhaustedError(
        absl::StrCat(events.size(), " events dropped: the telemetry queue is full"));
  }
  const auto now = ToProto(clock_.Now());
  for (auto& event : events) {
    event.set_seq(job.last_event_seq() + 1);
    job.set_last_event_seq(event.seq());
    if (!event.has_time()) *event.mutable_time() = now;
  }
  telemetry_->Append(job, std::move(events));
  Show(job);
  return absl::OkStatus();
}

absl::Status JobBook::Commit(const std::string& id, const std::function<void(v1::Job&)>& edit,
                             std::vector<v1::JobEvent> events) {
  const v1::Job* current = FindActive(id);
  if (current == nullptr) return absl::NotFoundError(absl::StrCat("job ", id, " is not active"));
  std::vector<Prepared> prepared;
  prepared.push_back(Prepare(*current, edit, std::move(events), {}));
  if (auto s = Store(prepared); !s.ok()) return s;
  Install(std::move(prepared.front()));
  return absl::OkStatus();
}

JobBook::Prepared JobBook::Prepare(const v1::Job& current,
                                   const std::function<void(v1::Job&)>& edit,
                                   std::vector<v1::JobEvent> events,
                                   std::vector<JobUpdate> reports) {
  Prepared p{current, std::move(events), std::move(reports)};
  if (edit) edit(p.job);
  const auto now = ToProto(clock_.Now());
  for (auto& event : p.events) {
    event.set_seq(p.job.last_event_seq() + 1);
    p.job.set_last_event_seq(event.seq());
    if (!event.has_time()) *event.mutable_time() = now;
    if (event.has_state_change()) event.mutable_state_change()->set_attempt(p.job.attempt());
  }
  return p;
}

absl::Status JobBook::Store(std::vector<Prepared>& prepared) {
  if (prepared.empty()) return absl::OkStatus();
  absl::Status stored;
  if (prepared.size() == 1 && prepared.front().reports.empty()) {
    stored = store_.Commit(prepared.front().job, prepared.front().events);
  } else {
    // One transaction: each job's reports, then its change.
    std::vector<JobUpdate> updates;
    for (const auto& p : prepared) {
      updates.insert(updates.end(), p.reports.begin(), p.reports.end());
      updates.push_back({p.job, p.events});
    }
    stored = store_.CommitBatch(updates);
  }
  if (!stored.ok() && telemetry_) {
    // Nothing of it is stored, and memory is as it was: the reports go back to the
    // telemetry writer, ahead of any later ones, to be written (and published) as usual.
    for (auto& p : prepared) telemetry_->GiveBack(std::move(p.reports));
  }
  return stored;
}

void JobBook::Install(Prepared prepared) {
  const std::string id = prepared.job.id();
  const bool terminal = IsTerminal(prepared.job.state());
  if (terminal) {
    ++finished_[prepared.job.state()];
    active_.erase(id);
    Hide(id);
  } else {
    v1::Job& job = active_[id];
    job = std::move(prepared.job);
    Show(job);
  }
  for (const auto& report : prepared.reports) hub_.Publish(id, report.events, /*terminal=*/false);
  hub_.Publish(id, prepared.events, terminal);
}

}  // namespace stoke::server
