// Between the wire (stoke.v1 messages) and the engine's plain structs (worker/common).
#pragma once

#include "absl/status/statusor.h"
#include "stoke/v1/worker_link.pb.h"
#include "worker/common/task.h"
#include "worker/telemetry/device_sampler.h"

namespace stoke::worker {

// INVALID_ARGUMENT naming the spec field this worker cannot run.
absl::StatusOr<TrainTask> TaskFromAssignment(const v1::Assignment& assignment);

v1::MetricSample ToProto(const MetricSample& sample);
MetricSample FromProto(const v1::MetricSample& sample);
// The parts of a start-up; `seconds` (assignment -> first step) is the caller's to set,
// and completed_at travels apart.
v1::WorkerStartup ToProto(const StartupTimes& times);
StartupTimes FromProto(const v1::WorkerStartup& startup);
v1::Device ToProto(const DeviceInfo& info);
v1::DeviceStats ToProto(const DeviceStats& stats);
v1::TaskOutcome ToProto(TrainOutcome::Kind kind);

}  // namespace stoke::worker
