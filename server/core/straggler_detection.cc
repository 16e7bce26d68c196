#include "server/core/straggler_detection.h"

#include <algorithm>
#include <numeric>

namespace stoke::server {
namespace {

double Median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

bool Complete(const StepWindow& window, uint32_t world_size) {
  if (window.ranks.size() != world_size) return false;
  for (uint32_t rank = 0; rank < world_size; ++rank) {
    auto it = window.ranks.find(rank);
    if (it == window.ranks.end()) return false;
    const RankWindow& r = it->second;
    // NaN fails both comparisons.
    if (!(r.step_seconds > 0) || !(r.comm_wait_ratio >= 0 && r.comm_wait_ratio <= 1)) {
      return false;
    }
  }
  return true;
}

// The values of every rank but `rank`.
std::vector<double> Others(const std::vector<double>& values, uint32_t rank) {
  std::vector<double> others;
  others.reserve(values.size() - 1);
  for (uint32_t r = 0; r < values.size(); ++r) {
    if (r != rank) others.push_back(values[r]);
  }
  return others;
}

}  // namespace

std::map<uint32_t, SlowRank> JudgeWindow(const StepWindow& window, uint32_t world_size,
                                         const StragglerThresholds& thresholds) {
  std::map<uint32_t, SlowRank> slow;
  if (world_size < 2 || !Complete(window, world_size)) return slow;
  std::vector<double> step(world_size), compute(world_size), wait(world_size);
  for (const auto& [rank, r] : window.ranks) {
    step[rank] = r.step_seconds;
    wait[rank] = r.step_seconds * r.comm_wait_ratio;
    compute[rank] = r.step_seconds - wait[rank];
  }
  for (uint32_t rank = 0; rank < world_size; ++rank) {
    const double peers = Median(Others(compute, rank));
    if (peers > 0 && compute[rank] >= (1 + thresholds.compute_excess) * peers) {
      slow[rank] = {v1::STRAGGLER_CAUSE_COMPUTE, compute[rank] / peers - 1};
    }
  }
  // The others wait for a rank that computes slowly; that wait names no one else.
  if (!slow.empty()) return slow;
  for (uint32_t rank = 0; rank < world_size; ++rank) {
    const double over = (wait[rank] - Median(Others(wait, rank))) / step[rank];
    if (over >= thresholds.allreduce_excess) {
      slow[rank] = {v1::STRAGGLER_CAUSE_ALLREDUCE, over};
    }
  }
  return slow;
}

StragglerState NextStragglerState(StragglerState state, const StepWindow& window,
                                  uint32_t world_size, const StragglerThresholds& thresholds) {
  if (world_size < 2 || !Complete(window, world_size)) return state;
  const std::map<uint32_t, SlowRank> slow = JudgeWindow(window, world_size, thresholds);
  for (uint32_t rank = 0; rank < world_size; ++rank) {
    RankStraggle& r = state.ranks[rank];
    auto verdict = slow.find(rank);
    if (verdict == slow.end()) {
      r.slow_run = 0;
      r.run_cause = v1::STRAGGLER_CAUSE_UNSPECIFIED;
      r.run_excess.clear();
      if (r.named && ++r.normal_run >= thresholds.windows_to_clear) r = RankStraggle{};
      continue;
    }
    if (verdict->second.cause != r.run_cause) {
      r.run_cause = verdict->second.cause;
      r.slow_run = 0;
      r.run_excess.clear();
    }
    ++r.slow_run;
    r.run_excess.push_back(verdict->second.excess);
    while (r.run_excess.size() > static_cast<size_t>(thresholds.windows_to_name)) {
      r.run_excess.pop_front();
    }
    const double mean_excess =
        std::accumulate(r.run_excess.begin(), r.run_excess.end(), 0.0) / r.run_excess.size();
    if (r.named) {
      r.normal_run = 0;
      ++r.slow_windows;
      if (r.run_cause == r.cause) {
        r.excess = mean_excess;
      } else if (r.slow_run >= thresholds.windows_to_name) {
        // Slow for another reason now, as persistently: say that one.
        r.cause = r.run_cause;
        r.excess = mean_excess;
      }
    } else if (r.slow_run >= thresholds.windows_to_name) {
      r.named = true;
      r.cause = r.run_cause;
      r.excess = mean_excess;
      r.slow_windows = r.slow_run;
      r.normal_run = 0;
    }
  }
  return state;
}

StragglerState DetectStragglers(const std::vector<StepWindow>& history, uint32_t world_size,
                                const StragglerThresholds& thresholds) {
  StragglerState state;
  for (const StepWindow& window : history) {
    state = NextStragglerState(std::move(state), window, world_size, thresholds);
  }
  return state;
}

std::vector<v1::Straggler> NamedStragglers(const StragglerState& state) {
  std::vector<v1::Straggler> named;
  for (const auto& [rank, r] : state.ranks) {
    if (!r.named) continue;
    v1::Straggler& s = named.emplace_back();
    s.set_rank(rank);
    s.set_cause(r.cause);
    s.set_excess(r.excess);
    s.set_windows(static_cast<uint32_t>(r.slow_windows));
  }
  return named;
}

}  // namespace stoke::server
