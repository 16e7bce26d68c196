#include "server/core/log_budget.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"

namespace stoke::server {
namespace {

// A stored line's row beside its text: the job, its number, the time, the rank.
constexpr uint64_t kRowBytes = 32;
// How long a job whose every line is dropped waits between notices.
constexpr absl::Duration kNoticeEvery = absl::Seconds(10);

std::string Count(uint64_t n) {
  std::string digits = absl::StrCat(n);
  for (int at = static_cast<int>(digits.size()) - 3; at > 0; at -= 3) digits.insert(at, ",");
  return digits;
}

std::string Size(uint64_t bytes) {
  if (bytes < (1 << 10)) return absl::StrCat(bytes, " bytes");
  if (bytes < (1 << 20)) return absl::StrFormat("%.1f KiB", bytes / 1024.0);
  return absl::StrFormat("%.1f MiB", bytes / 1048576.0);
}

}  // namespace

uint64_t LogLineBytes(const v1::LogLine& line) { return line.text().size() + kRowBytes; }

v1::LogLine LogBudget::Notice(JobState& state, absl::Time now) const {
  v1::LogLine notice;
  const std::string why =
      state.over_total
          ? absl::StrCat("the job's log has reached its total of ", Size(limits_.total_bytes),
                         " (stoke-coordinator --job-log-max)")
          : absl::StrCat("the job printed faster than its log budget of ",
                         Size(limits_.bytes_per_second), "/s (stoke-coordinator --job-log-rate)");
  notice.set_text(absl::StrCat("stoke: ", Count(state.unsaid_lines), " log lines (",
                               Size(state.unsaid_bytes), ") dropped: ", why));
  state.unsaid_lines = 0;
  state.unsaid_bytes = 0;
  state.last_notice = now;
  return notice;
}

LogBudget::Admitted LogBudget::Admit(const std::string& job_id, uint64_t stored_bytes,
                                     absl::Time now,
                                     const google::protobuf::RepeatedPtrField<v1::LogLine>& lines) {
  Admitted admitted;
  if (lines.empty() && jobs_.find(job_id) == jobs_.end()) return admitted;
  JobState& state = jobs_[job_id];
  const double burst = static_cast<double>(std::max(limits_.burst_bytes, limits_.bytes_per_second));
  if (state.refilled == absl::InfinitePast()) {
    state.tokens = burst;  // a job starts with a full bucket
  } else if (now > state.refilled) {
    state.tokens =
        std::min(burst, state.tokens + absl::ToDoubleSeconds(now - state.refilled) *
                                           static_cast<double>(limits_.bytes_per_second));
  }
  state.refilled = std::max(now, state.refilled);
  for (const v1::LogLine& line : lines) {
    const uint64_t cost = LogLineBytes(line);
    const bool over_total =
        limits_.total_bytes > 0 && stored_bytes + admitted.bytes + cost > limits_.total_bytes;
    const bool over_rate = limits_.bytes_per_second > 0 && state.tokens < static_cast<double>(cost);
    if (over_total || over_rate) {
      state.over_total = state.over_total || over_total;
      ++state.unsaid_lines;
      state.unsaid_bytes += cost;
      ++admitted.dropped_lines;
      continue;
    }
    if (state.unsaid_lines > 0) admitted.lines.push_back(Notice(state, now));
    if (limits_.bytes_per_second > 0) state.tokens -= static_cast<double>(cost);
    admitted.bytes += cost;
    admitted.lines.push_back(line);
  }
  if (state.unsaid_lines > 0 && now - state.last_notice >= kNoticeEvery) {
    admitted.lines.push_back(Notice(state, now));
  }
  return admitted;
}

std::vector<v1::LogLine> LogBudget::Finish(const std::string& job_id) {
  std::vector<v1::LogLine> notice;
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return notice;
  if (it->second.unsaid_lines > 0) notice.push_back(Notice(it->second, absl::Now()));
  jobs_.erase(it);
  return notice;
}

}  // namespace stoke::server
