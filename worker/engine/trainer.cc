#include "worker/engine/trainer.h"

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <exception>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "worker/common/status_error.h"
#include "worker/common/user_code_error.h"
#include "worker/engine/evaluator.h"
#include "worker/engine/step_math.h"
#include "worker/engine/training_run.h"
#include "worker/ops/step_context.h"
#include "worker/runtime/device_timer.h"
#include "worker/runtime/step_trace.h"
#include "worker/runtime/torch_compat.h"

namespace stoke::worker {
namespace {

std::string DescribeEval(uint64_t step, const EvalResult& r) {
  std::ostringstream out;
  out << "eval at step " << step << ": loss " << r.loss;
  if (r.accuracy > 0) out << ", accuracy " << r.accuracy;
  if (r.perplexity > 0) out << ", perplexity " << r.perplexity;
  out << " (" << r.samples << " samples)";
  return out.str();
}

// Hands a sample to the observer, or ends training if the loss has diverged: another
// attempt from the same seed would diverge again, so it is not retried.
std::optional<TrainOutcome> Report(const MetricSample& sample, TrainingObserver& observer) {
  if (!std::isfinite(sample.loss)) {
    return TrainOutcome{TrainOutcome::Kind::kFailed,
                        "loss became " + std::to_string(sample.loss) + " by step " +
                            std::to_string(sample.step) + "; lower optimizer.lr or check the data",
                        /*retryable=*/false};
  }
  observer.OnMetrics(sample);
  return std::nullopt;
}

// An allocation that failed will fail the same way on the next attempt (the spec asks for
// more than the device holds), so it is not retried; the message says what to make
// smaller.
std::string OutOfMemoryMessage(const std::string& where, const std::string& detail) {
  return "out of memory " + where +
         ": the model, its optimizer state and a batch's activations do not fit this device; "
         "lower training.batch_size (or set training.batch_size_auto), or make the model "
         "smaller (fewer or narrower layers, a shorter context, a smaller vocabulary): " +
         detail;
}

// How a run that threw ended: what went wrong as a status code, from which whether
// another attempt may succeed follows (IsRetryable), and a message naming the step.
// `first_step`: the run's first step (0 while it was being built).
TrainOutcome FailureOf(std::exception_ptr error, uint64_t step, uint64_t first_step,
                       TrainingObserver& observer) {
  const std::string at_step = "at step " + std::to_string(step);
  const std::string where = step == 0 ? "while building the model and its data" : at_step;
  absl::StatusCode code = absl::StatusCode::kUnknown;
  std::string message;
  try {
    std::rethrow_exception(std::move(error));
  } catch (const UserCodeError& e) {
    // The user's traceback goes to the job's log; the message says where. Raised while
    // building or at the run's first step it would be raised again by another attempt.
    std::istringstream lines(e.traceback());
    for (std::string line; std::getline(lines, line);) observer.OnLog(line);
    message = std::string(e.what()) + " (" + where + ")";
    const bool deterministic = step == 0 || step <= first_step;
    code = deterministic ? absl::StatusCode::kInvalidArgument : absl::StatusCode::kUnknown;
  } catch (const StatusError& e) {
    // Carries its own code: a data path not mounted yet is retried, a bad file is not.
    code = e.code();
    message = e.what();
  } catch (const CollectiveTimeout& e) {
    code = absl::StatusCode::kDeadlineExceeded;
    message = at_step + ": " + e.what();
  } catch (const c10::Error& e) {
    if (compat::IsOutOfMemory(e)) {
      code = absl::StatusCode::kResourceExhausted;
      message = OutOfMemoryMessage(where, e.what_without_backtrace());
    } else {
      code = absl::StatusCode::kInternal;
      message = "LibTorch error " + at_step + ": " + e.what_without_backtrace();
    }
  } catch (const std::bad_alloc&) {
    code = absl::StatusCode::kResourceExhausted;
    message = OutOfMemoryMessage(where, "host memory allocation failed (std::bad_alloc)");
  } catch (const std::invalid_argument& e) {
    // The spec asks for something this data or model cannot do.
    code = absl::StatusCode::kInvalidArgument;
    message = e.what();
  } catch (const std::exception& e) {
    message = "error " + at_step + ": " + e.what();
  }
  return {TrainOutcome::Kind::kFailed, message, IsRetryable(code)};
}

// Tells the observer when the run's first step has completed on the device, without
// waiting for it: marks on the device around the step, looked at after each later step.
class FirstStepWatch {
 public:
  FirstStepWatch(TrainingRun& run, TrainingObserver& observer) : run_(run), observer_(observer) {}

  void BeforeStep(uint64_t step) {
    if (step != run_.first_step) {
      return;
    }
    began_ = std::chrono::steady_clock::now();
    start_ = DeviceTimer::Record(run_.device);
  }
  void AfterStep(uint64_t step) {
    if (step == run_.first_step) {
      end_ = DeviceTimer::Record(run_.device);
    }
    if (end_ && end_->Ready()) {
      Report();
    }
  }
  // The end of training: a first step not yet seen done is waited for.
  void Finish() {
    if (!end_) {
      return;
    }
    end_->Wait();
    Report();
  }

 private:
  void Report() {
    // The step's own device time from when the host began it: the host may have run ahead
    // by the time it looks.
    StartupTimes times = run_.startup;
    times.first_step_seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - began_).count();
    if (start_->Ready()) {
      const double device_seconds = end_->SecondsSince(*start_);
      const double host_seconds = times.first_step_seconds;
      times.first_step_seconds = std::min(host_seconds, std::max(0.0, device_seconds));
    }
    times.completed_at = began_ + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                      std::chrono::duration<double>(times.first_step_seconds));
    end_.reset();
    start_.reset();
    observer_.OnFirstStep(times);
  }

  TrainingRun& run_;
  TrainingObserver& observer_;
  std::chrono::steady_clock::time_point began_;
  std::unique_ptr<DeviceTimer> start_;
  std::unique_ptr<DeviceTimer> end_;
};

// When a checkpoint is due: at its step interval, unless the last one (or the start) is
// fewer than min_interval_seconds behind; always at the last step. Only rank 0 writes, so
// a decision by its own clock needs no agreement between ranks.
class CheckpointPace {
 public:
  explicit CheckpointPace(const CheckpointConfig& config)
      : config_(config), last_(std::chrono::steady_clock::now()) {}

  bool Due(uint64_t step, uint64_t last_step) {
    const bool at_interval = config_.interval_steps > 0 && step % config_.interval_steps == 0;
    if (!at_interval && step != last_step) return false;  // most steps: no clock read
    const auto now = std::chrono::steady_clock::now();
    if (step != last_step && now - last_ < std::chrono::seconds(config_.min_interval_seconds)) {
      return false;
    }
    last_ = now;
    return true;
  }

 private:
  const CheckpointConfig& config_;
  std::chrono::steady_clock::time_point last_;
};

// Whether a preemption asks the run to stop now, `trained` steps in.
bool PreemptionDue(const TrainingProbe& probe, uint64_t trained) {
  if (probe.preempt_after == nullptr) return false;
  const uint64_t after = probe.preempt_after->load(std::memory_order_relaxed);
  return after != TaskStops::kNotPreempted && (after == 0 || trained >= after);
}

// The steps of a built run, from its first to its last, with evaluation, metrics and
// checkpoints at their intervals. `step` is the step under way, for the failure message.
TrainOutcome Loop(TrainingRun& run, TrainingObserver& observer, const std::atomic<bool>& cancel,
                  const TrainingProbe& probe, uint64_t& step) {
  const TrainTask& task = run.task;
  const auto& t = task.training;
  const uint32_t interval = std::max<uint32_t>(1, t.metrics_interval_steps);
  const uint32_t eval_interval = task.eval.interval_steps;
  CheckpointPace checkpoints(task.checkpoint);
  const bool write_checkpoints = !task.job_dir.empty() && task.rank == 0;
  MetricWindow& metrics = *run.metrics;
  observer.OnStarted();

  StepTrace trace(task.job_id, task.rank, [&](const std::string& line) { observer.OnLog(line); });
  FirstStepWatch first_step(run, observer);
  uint64_t skipped_logged = 0;                 // said in the log at 1, 2, 4, 8, ... skipped samples
  uint64_t checkpointed = run.first_step - 1;  // the newest checkpoint's step (or none: 0)
  double lr = 0;
  for (step = run.first_step; step <= run.total_steps; ++step) {
    if (cancel.load(std::memory_order_relaxed)) {
      return {TrainOutcome::Kind::kCancelled, "cancelled at step " + std::to_string(step - 1)};
    }
    if (PreemptionDue(probe, step - 1)) {
      // The samples and a checkpoint of exactly the last step trained: resumed, the job
      // goes on from there and its loss curve has no gap and no repeat.
      const uint64_t trained = step - 1;
      if (trained >= run.first_step && trained % interval != 0) {
        metrics.EndWindow(trained, static_cast<uint32_t>((trained - 1) / run.steps_per_epoch), lr,
                          run.data.train->TakeWaitSeconds(),
                          run.reducer ? run.reducer->TakeExposedSeconds() : 0.0);
      }
      while (auto sample = metrics.PollBlocking()) {
        if (auto diverged = Report(*sample, observer)) return *diverged;
      }
      if (write_checkpoints && trained > checkpointed) {
        run.optimizer->SyncHostState();
        run.checkpoints->Save(trained, *run.net, run.optimizer->state(), run.device_ref,
                              run.scaler.get());
      }
      return {TrainOutcome::Kind::kPreempted,
              "preempted after step " + std::to_string(trained) + ", its checkpoint written"};
    }
    if (probe.before_step) probe.before_step(step);
    lr = LearningRateAt(task.optimizer, step, run.total_steps);
    run.optimizer->SetLearningRate(lr);
    first_step.BeforeStep(step);
    std::vector<Batch> micro_batches(static_cast<size_t>(t.grad_accum_steps));
    for (auto& batch : micro_batches) batch = run.data.train->Next();
    trace.BeforeStep(step);
    // The runner takes the batches (it may let them go early: train_step.h).
    for (const auto& loss : run.runner->Run(std::move(micro_batches))) metrics.AddLoss(loss);
    trace.AfterStep(step);
    first_step.AfterStep(step);

    const uint32_t epoch = static_cast<uint32_t>((step - 1) / run.steps_per_epoch);
    if (step % interval == 0 || step == run.total_steps) {
      metrics.EndWindow(step, epoch, lr, run.data.train->TakeWaitSeconds(),
                        run.reducer ? run.reducer->TakeExposedSeconds() : 0.0);
    }
    while (auto sample = metrics.Poll()) {
      sample->samples_skipped = static_cast<uint64_t>(run.data.train->SkippedSamples());
      if (sample->samples_skipped >= std::max<uint64_t>(1, 2 * skipped_logged)) {
        observer.OnLog("data: " + std::to_string(sample->samples_skipped) +
                       " samples skipped so far: their files cannot be read or decoded");
        skipped_logged = sample->samples_skipped;
      }
      if (auto diverged = Report(*sample, observer)) return *diverged;
    }
    if ((eval_interval > 0 && step % eval_interval == 0) || step == run.total_steps) {
      MetricSample sample;
      sample.step = step;
      sample.total_steps = run.total_steps;
      sample.epoch = epoch;
      sample.eval = Evaluate(*run.net, *run.data.eval, run.shape.kind,
                             run.math.autocast && run.math.dtype == at::kBFloat16, cancel);
      if (!sample.eval) {
        return {TrainOutcome::Kind::kCancelled,
                "cancelled during the evaluation at step " + std::to_string(step)};
      }
      observer.OnLog(DescribeEval(step, *sample.eval));
      observer.OnMetrics(sample);
    }
    if (write_checkpoints && checkpoints.Due(step, run.total_steps)) {
      run.optimizer->SyncHostState();
      run.checkpoints->Save(step, *run.net, run.optimizer->state(), run.device_ref,
                            run.scaler.get());
      checkpointed = step;
    }
  }
  first_step.Finish();
  while (auto sample = metrics.PollBlocking()) {
    if (auto diverged = Report(*sample, observer)) return *diverged;
  }
  if (probe.on_finished) probe.on_finished(run.parameters);
  return {TrainOutcome::Kind::kSucceeded, "finished " + std::to_string(run.total_steps) + " steps",
          true};
}

}  // namespace

uint64_t TotalSteps(const TrainTask& task, int64_t batches_per_epoch) {
  if (task.training.steps > 0) return task.training.steps;
  // Whole optimizer steps per epoch; a partial accumulation at the end is dropped too.
  const int64_t steps_per_epoch =
      std::max<int64_t>(1, batches_per_epoch / task.training.grad_accum_steps);
  return static_cast<uint64_t>(steps_per_epoch) * task.training.epochs;
}

TrainOutcome RunTraining(const TrainTask& task, const DeviceRef& device_ref,
                         TrainingObserver& observer, const std::atomic<bool>& cancel) {
  return RunTraining(task, device_ref, observer, cancel, TrainingProbe{});
}

TrainOutcome RunTraining(const TrainTask& task, const DeviceRef& device_ref,
                         TrainingObserver& observer, const std::atomic<bool>& cancel,
                         const TrainingProbe& probe) {
  uint64_t step = 0;
  uint64_t first_step = 0;
  try {
    std::unique_ptr<TrainingRun> run =
        BuildTrainingRun(task, device_ref, observer, cancel, probe.build_network);
    first_step = run->first_step;
    // Steps, evaluation and checkpoints all run under the run's step context.
    const StepContextScope context(run->context.get());
    return Loop(*run, observer, cancel, probe, step);
  } catch (...) {
    // A read stopped by the cancel, or anything that failed once it was asked for: the
    // job was cancelled, not failed.
    if (cancel.load(std::memory_order_relaxed)) {
      return {TrainOutcome::Kind::kCancelled, step == 0
                                                  ? "cancelled while preparing the run"
                                                  : "cancelled at step " + std::to_string(step)};
    }
    return FailureOf(std::current_exception(), step, first_step, observer);
  }
}

}  // namespace stoke::worker
