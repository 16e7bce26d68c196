// Which rank of a job of several ranks holds the others back: a pure function of the
// ranks' metric windows, so it is tested with made-up histories.
//
// In synchronous data-parallel training every rank's step takes as long as the slowest
// one's, so step time alone names no one. What differs is how the step splits: the slow
// rank computes longer, and its peers wait for it in the gradient all-reduce. For each
// window (the same optimizer step reported by every rank) a rank's compute is
// step_seconds x (1 - comm_wait_ratio) and its wait is step_seconds x comm_wait_ratio.
//
// A rank is slow in a window
//   - by compute when its compute is >= 10% above the median of the other ranks' computes;
//   - by all-reduce when no rank of the window is slow by compute and its wait exceeds the
//     median of the other ranks' waits by >= 10% of its step time (a slow link: the
//     others' waits are explained when someone computes slowly, so that case comes first).
// It is named a straggler after 5 consecutive windows slow by the same cause, and cleared
// after 5 consecutive windows that are not slow.
//
// Edge cases:
//   - One rank: no peers, no straggler. Two ranks: the median of the others is the other
//     rank's value.
//   - A window counts only when every rank of the job reported that step with a positive
//     step time. Incomplete windows (a rank's sample lost, ranks reporting at different
//     steps) are skipped: they neither extend nor break a run. Ranks that never report
//     the same steps are never judged.
//   - A rank slow by compute in one window and by all-reduce in the next starts a new run.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <vector>

#include "stoke/v1/job.pb.h"

namespace stoke::server {

struct StragglerThresholds {
  double compute_excess = 0.10;    // compute over the others' median, as a fraction of it
  double allreduce_excess = 0.10;  // wait over the others' median, as a share of the step
  int windows_to_name = 5;
  int windows_to_clear = 5;
};

// One rank's numbers for one window.
struct RankWindow {
  double step_seconds = 0;
  double comm_wait_ratio = 0;
};

// The same optimizer step as each rank reported it.
struct StepWindow {
  uint64_t step = 0;
  std::map<uint32_t, RankWindow> ranks;
};

// One rank's verdict in one window.
struct SlowRank {
  v1::StragglerCause cause = v1::STRAGGLER_CAUSE_UNSPECIFIED;
  double excess = 0;  // as Straggler.excess
};

// Where each rank stands after the windows seen so far.
struct RankStraggle {
  // The run of consecutive slow windows of one cause, and their excesses (the newest
  // windows_to_name of them).
  v1::StragglerCause run_cause = v1::STRAGGLER_CAUSE_UNSPECIFIED;
  int slow_run = 0;
  std::deque<double> run_excess;
  // Named: the cause it was named for, and the normal windows since.
  bool named = false;
  v1::StragglerCause cause = v1::STRAGGLER_CAUSE_UNSPECIFIED;
  double excess = 0;
  int slow_windows = 0;  // slow windows since the run that named it began
  int normal_run = 0;
};

struct StragglerState {
  std::map<uint32_t, RankStraggle> ranks;
};

// The ranks slow in `window` of a job of `world_size` ranks, by rank; empty when the window
// is incomplete or the job has one rank.
std::map<uint32_t, SlowRank> JudgeWindow(const StepWindow& window, uint32_t world_size,
                                         const StragglerThresholds& thresholds = {});

// `state` after one more window (skipped, as above, when incomplete).
StragglerState NextStragglerState(StragglerState state, const StepWindow& window,
                                  uint32_t world_size, const StragglerThresholds& thresholds = {});

// The state after `history`, oldest window first.
StragglerState DetectStragglers(const std::vector<StepWindow>& history, uint32_t world_size,
                                const StragglerThresholds& thresholds = {});

// The ranks named in `state`, by rank: rank, cause, excess and windows set (where they run
// and the summary are the caller's to add).
std::vector<v1::Straggler> NamedStragglers(const StragglerState& state);

}  // namespace stoke::server
