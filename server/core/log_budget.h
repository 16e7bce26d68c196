// How much of a job's log the coordinator stores: a job's code prints what it likes (a
// script's `yes` makes 14 GB an hour), and every line it prints would otherwise become a
// row of the store. Each job gets a rate (bytes a second, with a burst for the bursts
// real jobs have: a traceback, pip's output, an epoch summary) and a total. Lines beyond
// either are dropped and counted, and the job's own log says how many ("12,345 log lines
// (3.1 MiB) dropped: ..."), so its reader sees where it has a hole and why.
//
// Pure bookkeeping: the caller passes the time and the job's stored total (kept in the
// job itself, Job.log_bytes, so a restart of the coordinator does not reset it).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "stoke/v1/job.pb.h"

namespace stoke::server {

struct LogLimits {
  uint64_t bytes_per_second = 32 << 10;  // --job-log-rate; 0: no rate limit
  uint64_t burst_bytes = 1 << 20;        // what may come at once after a quiet while
  uint64_t total_bytes = 64 << 20;       // --job-log-max; 0: no total
};

// What a line costs: its text, plus what its row costs beside the text.
uint64_t LogLineBytes(const v1::LogLine& line);

class LogBudget {
 public:
  explicit LogBudget(LogLimits limits) : limits_(limits) {}

  struct Admitted {
    std::vector<v1::LogLine> lines;  // those kept, a notice of what was dropped first
    uint64_t bytes = 0;              // the kept lines' cost (the job's total grows by it)
    uint64_t dropped_lines = 0;      // dropped from this batch
  };

  // The lines of one report of `job_id`, whose log already holds `stored_bytes`, at
  // `now`. A notice of lines dropped since the last one comes before the next line kept,
  // or alone once 10 s have passed with every line dropped (notices are not counted
  // against the budget).
  Admitted Admit(const std::string& job_id, uint64_t stored_bytes, absl::Time now,
                 const google::protobuf::RepeatedPtrField<v1::LogLine>& lines);

  // The notice of lines dropped and not yet said, if any (at the end of the job's attempt),
  // and the job forgotten.
  std::vector<v1::LogLine> Finish(const std::string& job_id);

  const LogLimits& limits() const { return limits_; }

 private:
  struct JobState {
    double tokens = 0;
    absl::Time refilled = absl::InfinitePast();
    uint64_t unsaid_lines = 0;  // dropped since the last notice
    uint64_t unsaid_bytes = 0;
    absl::Time last_notice = absl::InfinitePast();
    bool over_total = false;  // the notice names the total, not the rate
  };

  v1::LogLine Notice(JobState& state, absl::Time now) const;

  const LogLimits limits_;
  std::map<std::string, JobState> jobs_;
};

}  // namespace stoke::server
