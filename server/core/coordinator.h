// The coordinator's core: jobs (JobBook), workers (WorkerRegistry) and the scheduling
// policy (Scheduler), and the flows that cross them — submit, cancel, place a gang, lose a
// worker, finish a task. It knows nothing of gRPC: the API layer calls it with protobuf
// messages as data and gets absl::Status back. One mutex guards it all; nothing under it
// waits on the network (worker connections only queue).
#pragma once

#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/core/attempt.h"
#include "server/core/checkpoint_files.h"
#include "server/core/clock.h"
#include "server/core/event_hub.h"
#include "server/core/fair_share.h"
#include "server/core/job_book.h"
#include "server/core/log_budget.h"
#include "server/core/quotas.h"
#include "server/core/scheduler.h"
#include "server/core/start_prediction.h"
#include "server/core/telemetry_writer.h"
#include "server/core/worker_connection.h"
#include "server/core/worker_registry.h"
#include "server/store/job_store.h"
#include "stoke/v1/coordinator.pb.h"
#include "stoke/v1/worker_link.pb.h"

namespace stoke::server {

class Coordinator {
 public:
  struct Options {
    // A worker not heard from for this long is presumed dead and its job re-queued.
    absl::Duration heartbeat_timeout = absl::Seconds(15);
    // A job scheduled but not started by all its workers within this time (a worker that
    // heartbeats but never starts its assignment) goes back to the queue, without counting
    // as a restart of the job, and the workers that did not start are evicted. Zero: no
    // deadline.
    absl::Duration start_timeout = absl::Minutes(10);
    // How often workers are asked to send a heartbeat.
    absl::Duration heartbeat_interval = absl::Seconds(2);
    Scheduler::Options scheduler;
    // Jobs' files (checkpoints) go under <jobs_dir>/<id>.
    std::string jobs_dir;
    // The data roots (canonical), sent with every assignment: workers re-check the files
    // a job names against them when they open them.
    std::vector<std::string> data_roots;
    // Period of the background pass over timeouts and the queue; zero runs no
    // background thread (tests call Tick themselves).
    absl::Duration tick_interval = absl::Seconds(1);
    // A gap between two ticks longer than this means the coordinator itself stood still
    // (SIGSTOP, a paused VM, a machine swapping): its workers' silence over the gap is not
    // theirs, so each gets a whole heartbeat_timeout from the wake before it may be
    // presumed dead, and deadlines move by the gap. Zero: half the heartbeat timeout.
    absl::Duration stall_threshold = absl::ZeroDuration();
    // Ports handed out, in turn, for the rendezvous of jobs of several ranks (served by
    // rank 0's worker). A port that turns out taken there fails that attempt only.
    uint16_t first_rendezvous_port = 29400;
    uint16_t last_rendezvous_port = 29999;
    // Unfinished jobs (queued or running) one owner may have at once; a submission beyond
    // it is refused (RESOURCE_EXHAUSTED), so no one caller can grow the queue, the store
    // and every ListJobs without bound. Without --auth-tokens every job has the same
    // owner (""), and the cap is the coordinator's.
    size_t max_unfinished_jobs_per_owner = 500;
    // Least seconds between two checkpoints of a job: an assignment's spec asks for at
    // least this, so that no spec makes its workers write their folder in a loop.
    uint32_t min_checkpoint_seconds = 10;
    // Bytes one owner's job folders (checkpoints, logs, exports) may hold together; 0: no
    // limit. Past it, the owner's running jobs fail and their submissions are refused
    // until folders are cleared. Measured every disk_quota_interval.
    uint64_t max_job_bytes_per_owner = 0;
    absl::Duration disk_quota_interval = absl::Seconds(30);
    // How fast and how much each job's log may grow in the store (log_budget.h).
    LogLimits log_limits;
    // A preempted job's ranks stop at their next step boundary (writing a checkpoint of
    // it); one still running this long after the order is cancelled instead, and resumes
    // from its newest checkpoint.
    absl::Duration preemption_grace = absl::Minutes(2);
    // Devices guaranteed to groups of owners (--quotas); none by default.
    Quotas quotas;
    // Fair share: how fast an owner's past use of devices is forgotten.
    absl::Duration fair_share_half_life = absl::Hours(7 * 24);
    // Metric samples and log lines are written by a writer of their own (group commit).
    TelemetryWriter::Options telemetry;
  };

  static absl::StatusOr<std::unique_ptr<Coordinator>> Create(Options options, JobStore& store,
                                                             EventHub& hub, Clock& clock);
  ~Coordinator();

  // Recovers jobs from the store and starts the background pass. Jobs that were scheduled
  // or running stay where they are: their workers trained on while no coordinator ran,
  // and have heartbeat_timeout to reattach holding them; a job whose workers do not is
  // re-queued then (no restart counted).
  absl::Status Start();
  // From here on, losing workers changes no job: the coordinator is going away, and the
  // next one re-queues whatever was running without counting it as the job's failure.
  void BeginShutdown();
  // Stops the background pass, then writes the telemetry still queued.
  void Stop();
  // Returns once every metric sample and log line received so far is stored and
  // published (tests; a clean stop does it too).
  void FlushTelemetry();

  // --- The public API (validated requests). ---
  // With a request_id (SubmitJobRequest.request_id): a retry of an earlier submission
  // returns that job; ALREADY_EXISTS when the id came with another spec or from another
  // owner. `owner`: the submitting credential's name ("" when the coordinator has no
  // tokens). `audit`, when given: the submission's audit entry, stored with a new job in
  // its transaction (its target the job's id), and then `*audited` is set; a retry or a
  // refusal creates no job, and leaves recording the entry to the caller. `code`: a
  // Python model's checked code or a script job's working folder, stored under its digest
  // (spec::CodeDigestOf) before the job, and sent with each of its assignments.
  absl::StatusOr<v1::Job> SubmitJob(const v1::JobSpec& spec, const std::string& request_id = "",
                                    const std::string& owner = "",
                                    const v1::AuditEntry* audit = nullptr, bool* audited = nullptr,
                                    const v1::CodeBundle* code = nullptr);
  absl::StatusOr<v1::Job> GetJob(const std::string& id);
  absl::StatusOr<JobPage> ListJobs(const JobQuery& query);
  absl::StatusOr<v1::Job> CancelJob(const std::string& id, const std::string& reason);
  // An unfinished job's priority becomes `priority` (`by`: who changed it, for its log);
  // the queue is considered again at once, so the change may start or preempt jobs.
  // FAILED_PRECONDITION for a finished job.
  absl::StatusOr<v1::Job> SetJobPriority(const std::string& id, int32_t priority,
                                         const std::string& by);
  v1::Cluster GetCluster();
  // Every unfinished job, with its latest metrics (for /metrics).
  std::vector<v1::Job> ActiveJobs();
  // The job's complete checkpoints, oldest first; NOT_FOUND for an unknown job.
  absl::StatusOr<std::vector<CheckpointFiles>> ListCheckpoints(const std::string& id);

  // --- The worker link. ---
  // `address`: where the worker connected from, as the coordinator saw it.
  // `credential`: the name of what the worker authenticated with (a join token, a client
  // certificate); the id stays bound to the first one. Empty: no authentication.
  absl::Status AttachWorker(const v1::RegisterWorker& registration, const std::string& address,
                            const std::shared_ptr<WorkerConnection>& connection,
                            const std::string& credential = "");
  // The worker's link ended. One `may_reconnect` (its stream broke, rather than it sent
  // nonsense) that holds a task keeps it for heartbeat_timeout: back holding the task, it
  // carries on; otherwise its attempt fails then.
  void DetachWorker(const std::string& worker_id, const WorkerConnection* connection,
                    const std::string& reason, bool may_reconnect = true);
  void HandleWorkerMessage(const std::string& worker_id, const v1::WorkerMessage& message);

  // Declares silent workers dead and runs the scheduler; the background thread calls it
  // every tick_interval.
  void Tick();
  // Measures what each owner's job folders hold, and fails the running jobs of owners
  // over max_job_bytes_per_owner; a background thread calls it every disk_quota_interval
  // when there is a limit and a tick.
  void MeasureJobFolders();

 private:
  Coordinator(Options options, JobStore& store, EventHub& hub, Clock& clock);

  // With mu_ held: the unfinished job `id`; FAILED_PRECONDITION naming its final state
  // when it has finished, NOT_FOUND when there is none.
  absl::StatusOr<const v1::Job*> Unfinished(const std::string& id) const;
  // AttachWorker's checks: the registration's fields and its credential (no mu_ needed),
  // and an id still held by a live connection (under mu_).
  absl::Status AdmitRegistration(const v1::RegisterWorker& registration,
                                 const std::string& credential);
  absl::Status RefuseWhileHeld(const std::string& worker_id);
  // While an attempt waits for its workers to reattach, an id of its placement is
  // refused to any registration that does not hold that rank's task and its key.
  absl::Status RefuseWhileAwaited(const v1::RegisterWorker& registration) const;
  // A worker found claiming a GPU it lacks may not register with a CUDA device again
  // until its distrust (kGpuDistrust) has passed.
  absl::Status RefuseFoundOutGpu(const v1::RegisterWorker& registration);
  static constexpr absl::Duration kGpuDistrust = absl::Hours(1);
  // A new process registered a known worker's id: the old one's connection closes, and
  // its job goes back to the queue unless the new one holds the same task.
  void ReplaceWorkerProcess(const WorkerEntry& replaced, const v1::HeldTask* held);
  // A CUDA worker whose report lacks the readings any GPU gives has lied about its
  // device: its attempt fails and its connection closes (true).
  bool ClaimsAGpuItLacks(WorkerEntry& worker, const v1::TaskReport& report);

  void OnTaskStarted(const std::string& worker_id, const v1::TaskStarted& started);
  void OnTaskReport(const std::string& worker_id, const v1::TaskReport& report);
  void OnTaskFinished(const std::string& worker_id, const v1::TaskFinished& finished);
  void OnLeaving(const std::string& worker_id, const v1::Leaving& leaving);
  // A busy worker leaving with a grace: its job is preempted, to stop at a step boundary
  // and resume from there, and the worker is given no more work. False when it runs no
  // live attempt (it then leaves at once, as without a grace).
  bool PreemptForLeaving(WorkerEntry& worker, const std::string& reason);
  // A message about a job the sender does not hold (stale, or forged): ignored, counted.
  void RefuseReport(const std::string& worker_id, const char* kind, const std::string& job_id);

  // A rank of `job_id`'s attempt is gone or failed: stop the rest of the gang and
  // re-queue the job, or fail it when it has used up its restarts.
  void FailAttempt(const std::string& job_id, uint32_t attempt, const std::string& why,
                   bool retryable);
  // The attempt stops through no fault of the job (its worker is leaving): back to the
  // queue, the rest of the gang stopped, no restart counted.
  void RequeueAttempt(const std::string& job_id, uint32_t attempt, const std::string& why);
  // Tells every worker still on the job to stop; their devices free up when they confirm.
  void StopGang(const std::string& job_id, const std::string& reason);
  // A state change the job's workers have brought about (it started, finished, failed):
  // it happened whether or not the store took it, so one the store refused (a full disk)
  // is kept and tried again on every tick, in order, until it is stored or no longer
  // applies. Until then nothing acts on it: the job keeps its stored state.
  void RecordTransition(const std::string& job_id, uint32_t attempt, v1::JobState state,
                        const std::string& message,
                        const std::function<void(v1::Job&)>& edit = nullptr);
  void RetryUnsavedTransitions();
  void RemoveWorker(const WorkerEntry& entry, const std::string& why);
  // A worker reattached holding a task: the job carries on where it is when that attempt
  // is still placed on it; otherwise the task is stale and is cancelled.
  void ReclaimTask(const std::string& worker_id, const v1::HeldTask& held);
  // A worker reattached holding nothing: attempts awaiting it lost their rank.
  void ReleaseAwaitedPlacements(const std::string& worker_id);
  // Whether any rank of the job's current attempt `attempt` has started training.
  bool AnyRankStarted(const std::string& job_id, uint32_t attempt);
  // Tick: attempts whose awaited workers have all reattached carry on; those past their
  // deadline are given up.
  void SettleReattachments();
  // An attempt's awaited worker is not coming back (`what` says how): after a coordinator
  // restart back to the queue, after a broken link a failure (restarts counted).
  void AbandonAwaitedAttempt(const std::string& job_id, uint32_t attempt, Attempt::Absence absence,
                             const std::string& what);
  // Tick: jobs past their start deadline go back to the queue; the workers that did not
  // start them are evicted.
  void WithdrawUnstartedAssignments();
  // Places what the scheduler plans; the pass's placements are stored together.
  void Schedule();
  // Devices free once the pass's `starts` have taken theirs, by type.
  DeviceCapacity FreeAfter(const std::vector<PlannedStart>& starts);
  // After a pass: the jobs still `waiting` (in the scheduler's order) may preempt jobs of
  // lower priority (preemption.h); `free`: devices free after the pass's starts.
  void PreemptForWaiting(const std::vector<QueuedJob>& waiting, const DeviceCapacity& free);
  // Each waiting job's queue position and predicted start (start_prediction.h).
  std::map<std::string, StartPrediction> PredictQueue(const std::vector<QueuedJob>& waiting,
                                                      const std::vector<PlannedStart>& starts,
                                                      const DeviceCapacity& free, absl::Time now);
  // How much longer `job` will train: its steps left at its measured step time (or, before
  // it has one, that of the latest job of its shape); nullopt when neither is known.
  std::optional<absl::Duration> ExpectedRemaining(const v1::Job& job) const;
  // Rank 0's step time from a report, as its shape's latest.
  void NoteStepTime(const v1::Job& job, const v1::TaskReport& report);
  // Asks `victim`'s ranks to stop at a step boundary, for `for_job`.
  void OrderPreemption(const v1::Job& victim, const v1::Job& for_job);
  // Asks `victim`'s ranks to stop at a step boundary: `why` goes into its history
  // ("preempted <why>: ..."), `reason` to its ranks.
  void OrderPreemption(const v1::Job& victim, std::string why, const std::string& reason);
  // The preempted attempt has stopped (`how`): the job goes back to the queue, PREEMPTED.
  void FinishPreemption(const std::string& job_id, uint32_t attempt, const std::string& how);
  // Tick: preempted attempts still running past the grace are cancelled.
  void CancelLatePreemptions(absl::Time now);
  // The devices each running job holds, for quotas.
  std::vector<HeldDevices> HeldByRunningJobs() const;
  // Charges each owner's running jobs' devices since the last charge to fair share.
  void AccrueFairShare(absl::Time now);
  // At start: fair share from the stored jobs that ran within the last few half-lives.
  void RecallFairShare();
  // GetCluster's quota groups and owners.
  void DescribeSharing(v1::Cluster& cluster) const;
  // The SCHEDULED move of a planned start: the new attempt on its workers. A pass's
  // multi-rank jobs avoid `rendezvous_taken` (the pass's earlier ones), and add theirs.
  // The job's placement for `start`, and a new task key per rank in `task_keys`.
  JobBook::Change Placement(const PlannedStart& start, std::set<std::string>& rendezvous_taken,
                            std::vector<std::string>& task_keys);
  // Once its placement is stored: marks the workers busy and sends their assignments.
  void StartJob(const PlannedStart& start, const std::vector<std::string>& task_keys);
  // Thread-safe (no mu_ needed): adds why a queued job still waits to its message.
  v1::Job WithWaitingReason(v1::Job job) const;
  void PublishWaiting(std::map<std::string, std::string> reasons,
                      std::map<std::string, StartPrediction> predictions);
  // The job's current attempt, if it is placed; nullptr otherwise.
  Attempt* CurrentAttempt(const v1::Job& job);
  // Every rank of `job`'s attempt has started: it runs.
  void Running(const v1::Job& job, Attempt& attempt);
  // The attempt is over (stopped, failed, re-queued, done): its state and findings go.
  void EndAttempt(const std::string& job_id);
  // The ranks of `job_id` straggling now, for readers (none: the entry goes).
  void PublishStragglers(const std::string& job_id, std::vector<v1::Straggler> named);
  // Thread-safe (no mu_ needed): adds the ranks straggling now to a job read.
  v1::Job WithStragglers(v1::Job job) const;
  // host:port for a new attempt's rendezvous on `host`, avoiding ports live jobs hold
  // and those in `taken`.
  std::string RendezvousAddress(const std::string& host, std::set<std::string> taken);
  void TickLoop();
  // Measures the job folders every disk_quota_interval (its own thread: a walk of shared
  // storage must not delay the tick).
  void DiskQuotaLoop();
  // With mu_ held: why `owner` is over its disk quota, or nullopt.
  std::optional<std::string> OverDiskQuota(const std::string& owner) const;
  // Tick: after a gap past stall_threshold, forgives the silence and moves deadlines.
  void GraceAfterStall(absl::Time now);

  const Options options_;
  JobStore& store_;
  Clock& clock_;
  Scheduler scheduler_;

  // Before jobs_, which writes through it.
  std::unique_ptr<TelemetryWriter> telemetry_;
  std::mutex mu_;
  JobBook jobs_;
  WorkerRegistry workers_;
  // The attempts placed now (scheduled or running), by job.
  std::map<std::string, Attempt> attempts_;
  // The ranks straggling now, by job: a live finding, not stored; readers take it under
  // stragglers_mu_ without mu_, as they do the waiting reasons.
  mutable std::mutex stragglers_mu_;
  std::map<std::string, std::vector<v1::Straggler>> stragglers_;
  absl::Time last_tick_;  // the clock's reading at the last Tick, or at construction
  // Why each queued job is still waiting, its place and predicted start (from the last
  // scheduling pass); replaced whole under waiting_mu_, so that readers without mu_ share it.
  struct QueueView {
    std::map<std::string, std::string> reasons;
    std::map<std::string, StartPrediction> predictions;
  };
  mutable std::mutex waiting_mu_;
  std::shared_ptr<const QueueView> waiting_ = std::make_shared<const QueueView>();
  // The latest step time of each shape of job (StepTimeShape), for predictions.
  std::map<size_t, double> step_seconds_by_shape_;
  bool shutting_down_ = false;
  uint64_t refused_reports_ = 0;
  // Since this coordinator started.
  uint64_t preemptions_ = 0;
  double preemption_lost_seconds_ = 0;
  FairShare fair_share_;
  absl::Time fair_share_charged_to_;
  // Workers found claiming a GPU they lack, and until when they are not believed again.
  std::map<std::string, absl::Time> distrusted_gpu_workers_;
  uint16_t next_rendezvous_port_ = 0;
  struct UnsavedTransition {
    std::string job_id;
    uint32_t attempt;
    v1::JobState state;
    std::string message;
    std::function<void(v1::Job&)> edit;
  };
  std::vector<UnsavedTransition> unsaved_transitions_;

  std::mutex tick_mu_;
  std::condition_variable tick_cv_;
  bool stopping_ = false;
  std::thread ticker_;
  std::thread disk_quota_watch_;
  // The job folders' and the stored logs' bytes by owner, from the last measure (under
  // mu_); and each ended job's folder's owner and log size, known to the measuring thread
  // alone.
  std::map<std::string, uint64_t> owner_folder_bytes_;
  std::map<std::string, std::string> folder_owners_;
  std::map<std::string, uint64_t> ended_log_bytes_;  // by job, for the measuring thread
  LogBudget log_budget_;                             // guarded by mu_
};

}  // namespace stoke::server
