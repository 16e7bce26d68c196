// The coordinator's start-time predictions: each queued job's place and predicted start
// after every scheduling pass (start_prediction.h plays the queue forward), from the
// running jobs' remaining steps at their measured step times, and the step times of jobs
// of the same shape for jobs that have not run yet.
#include <functional>

#include "absl/strings/str_cat.h"
#include "server/core/coordinator.h"

namespace stoke::server {
namespace {

// What decides a job's step time: its model, data, batch, precision and devices. Two jobs
// of one shape (a sweep over learning rates, a job submitted again) step alike.
size_t StepTimeShape(const v1::JobSpec& spec) {
  v1::JobSpec shape;
  *shape.mutable_model() = spec.model();
  *shape.mutable_data() = spec.data();
  *shape.mutable_resources() = spec.resources();
  shape.mutable_resources()->clear_priority();
  shape.mutable_resources()->clear_preemptible();
  shape.mutable_training()->set_batch_size(spec.training().batch_size());
  shape.mutable_training()->set_grad_accum_steps(spec.training().grad_accum_steps());
  shape.mutable_training()->set_precision(spec.training().precision());
  return std::hash<std::string>{}(shape.SerializeAsString());
}

// Shapes remembered; past it the book starts again (an estimate, not a record).
constexpr size_t kMaxShapes = 10'000;

// Queued jobs given a predicted start, from the head of the queue: playing the scheduler
// forward costs about (jobs + devices) passes of the scheduler over the jobs, on every
// scheduling pass, so a long queue's tail gets its place only.
constexpr size_t kPredictedJobs = 128;

}  // namespace

void Coordinator::NoteStepTime(const v1::Job& job, const v1::TaskReport& report) {
  for (const auto& sample : report.metrics()) {
    if (sample.has_eval() || sample.step_seconds() <= 0) continue;
    if (step_seconds_by_shape_.size() >= kMaxShapes) step_seconds_by_shape_.clear();
    step_seconds_by_shape_[StepTimeShape(job.spec())] = sample.step_seconds();
  }
}

std::optional<absl::Duration> Coordinator::ExpectedRemaining(const v1::Job& job) const {
  const v1::MetricSample& latest = job.latest_metrics();
  double step_seconds = latest.step_seconds();
  if (step_seconds <= 0) {
    auto known = step_seconds_by_shape_.find(StepTimeShape(job.spec()));
    if (known == step_seconds_by_shape_.end()) return std::nullopt;
    step_seconds = known->second;
  }
  const uint64_t total =
      latest.total_steps() > 0 ? latest.total_steps() : job.spec().training().steps();
  if (total == 0) return std::nullopt;  // epochs over data not yet opened
  const uint64_t left = total > latest.step() ? total - latest.step() : 0;
  return absl::Seconds(static_cast<double>(left) * step_seconds);
}

std::map<std::string, StartPrediction> Coordinator::PredictQueue(
    const std::vector<QueuedJob>& waiting, const std::vector<PlannedStart>& starts,
    const DeviceCapacity& free, absl::Time now) {
  std::vector<BusyDevices> running;
  for (const v1::Job* job : jobs_.Active()) {
    if (!IsLive(job->state()) || job->placement_size() == 0) continue;
    const Attempt* attempt = CurrentAttempt(*job);
    // One being preempted frees its devices within a step.
    const auto remaining = attempt != nullptr && attempt->preemption()
                               ? std::make_optional(absl::ZeroDuration())
                               : ExpectedRemaining(*job);
    running.push_back({job->placement(0).device().type(),
                       static_cast<uint32_t>(job->placement_size()), remaining});
  }
  for (const PlannedStart& start : starts) {  // placed this pass, not yet stored as such
    const v1::Job* job = jobs_.FindActive(start.job_id);
    const WorkerEntry* worker = workers_.Find(start.worker_ids.front());
    if (job == nullptr || worker == nullptr) continue;
    running.push_back({worker->info.device().type(), static_cast<uint32_t>(start.worker_ids.size()),
                       ExpectedRemaining(*job)});
  }
  std::vector<WaitingJob> queue;
  for (const QueuedJob& q : waiting) {
    if (queue.size() == kPredictedJobs) break;
    const v1::Job* job = jobs_.FindActive(q.id);
    if (job != nullptr) queue.push_back({q, ExpectedRemaining(*job)});
  }
  auto predictions = PredictStarts(scheduler_, queue, running, free, workers_.Capacity(), now);
  for (size_t i = queue.size(); i < waiting.size(); ++i) {
    predictions[waiting[i].id].position = static_cast<uint32_t>(i + 1);
  }
  return predictions;
}

}  // namespace stoke::server
