// One job's straggler watch: gathers its ranks' training samples into windows (the same
// step from every rank), runs them through the detection (straggler_detection.h), and
// words what it finds for the job's log, `stoke status` and /metrics. One per attempt:
// a new attempt starts afresh.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "server/core/straggler_detection.h"
#include "stoke/v1/job.pb.h"

namespace stoke::server {

class StragglerWatch {
 public:
  explicit StragglerWatch(uint32_t world_size, StragglerThresholds thresholds = {})
      : world_size_(world_size), thresholds_(thresholds) {}

  // What one sample changed.
  struct Change {
    std::vector<uint32_t> named;    // ranks named now, or named again for another cause
    std::vector<uint32_t> cleared;  // ranks that are no longer stragglers
    bool any() const { return !named.empty() || !cleared.empty(); }
  };
  // Adds one training sample (not an evaluation) of `rank`.
  Change Add(uint32_t rank, const v1::MetricSample& sample);
  // The ranks straggling now, each with where it runs (from `job`'s placement) and its
  // summary.
  std::vector<v1::Straggler> Named(const v1::Job& job) const;
  bool any() const;
  // "rank 1 (worker ... on ..., cuda:1) is no longer a straggler: 5 windows in step with
  // its peers".
  std::string DescribeRecovery(const v1::Job& job, uint32_t rank) const;

 private:
  // Steps some ranks reported and others not yet; more than this many, and the oldest are
  // given up on (ranks reporting at different steps never complete one).
  static constexpr size_t kMaxPendingSteps = 32;

  uint32_t world_size_;
  StragglerThresholds thresholds_;
  std::map<uint64_t, StepWindow> pending_;  // by step
  StragglerState state_;
};

// "rank 1 (worker host-b/cuda:1 on host-b, cuda:1) is a straggler: its compute takes 23%
// longer than its peers' (5 windows); the others wait for it in all-reduce".
std::string DescribeStraggler(const v1::Straggler& straggler);

}  // namespace stoke::server
