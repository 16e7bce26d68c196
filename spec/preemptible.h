// Whether a job may be preempted (stopped at a step boundary for a job of higher
// priority, to resume later): as resources.preemptible says, else by default when its
// priority is below 0. One rule for the coordinator's policy and for what `stoke status`
// shows.
#pragma once

#include "spec/job_defaults.h"
#include "stoke/v1/job_spec.pb.h"

namespace stoke::spec {

inline bool IsPreemptible(const v1::ResourceSpec& resources) {
  return resources.has_preemptible() ? resources.preemptible()
                                     : resources.priority() < defaults::kPreemptibleBelowPriority;
}

}  // namespace stoke::spec
