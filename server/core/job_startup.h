// A job's start-up time: from entering the queue to the end of its first training step,
// put together from the job's own times (the coordinator's clock) and what rank 0's worker
// measured after receiving its assignment (the worker's clock, as durations only, so that
// the two hosts' clocks need not agree).
#pragma once

#include <optional>

#include "stoke/v1/job.pb.h"

namespace stoke::server {

// Nullopt when the worker's figures cannot be right (negative, not finite, or beyond a
// year): a start-up the coordinator cannot vouch for is not shown.
std::optional<v1::JobStartup> JobStartupFrom(const v1::Job& job, const v1::WorkerStartup& worker);

}  // namespace stoke::server
