// Jobs and events as the store tests write them: a named job in a state, its newest
// event numbered 1, and a state change at a sequence number.
#pragma once

#include <cstdint>
#include <string>

#include "stoke/v1/job.pb.h"

namespace stoke::testing {

inline v1::Job NewJob(const std::string& name, v1::JobState state = v1::JOB_STATE_PENDING) {
  v1::Job job;
  job.mutable_spec()->set_name(name);
  job.set_state(state);
  job.set_last_event_seq(1);
  return job;
}

inline v1::JobEvent StateEvent(uint64_t seq, v1::JobState state) {
  v1::JobEvent event;
  event.set_seq(seq);
  event.mutable_state_change()->set_state(state);
  return event;
}

}  // namespace stoke::testing
