// The live view of `stoke watch`: on a terminal, one progress line redrawn in place
// (bar, step/total, loss, samples/s, ETA) with state changes and log lines printed above
// it; when piped, one plain line per event, for logs and scripts.
#pragma once

#include <cstdio>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "stoke/v1/coordinator.pb.h"
#include "stoke/v1/job.pb.h"

namespace stoke::client {

class ProgressView {
 public:
  // `columns`: the terminal's width now (read at each redraw, so that a resized window
  // is followed); by default the width of the terminal `out` writes to, else 80.
  ProgressView(std::FILE* out, bool terminal, std::string job_id,
               std::function<int()> columns = nullptr);

  void OnEvent(const v1::JobEvent& event);
  void OnReconnect(const std::string& why);
  // What the job's devices are doing ("gpu 97%, 61.2 GiB"), shown on the live line.
  void SetDeviceSummary(std::string summary) { device_summary_ = std::move(summary); }
  // "gpu 97%, 61.2 GiB" (GPUs) or "cpu 48%, 1.2 GiB" for the job's workers' readings,
  // mean utilization and summed memory; empty when none has reported.
  static std::string DeviceSummary(const v1::Job& job, const v1::Cluster& cluster);
  // Ends the live line, if any.
  void Close();

  // The final state seen, if the job has finished.
  std::optional<v1::JobState> final_state() const { return final_state_; }
  // "eval at step 500: loss 0.3312, accuracy 88.10% on 10000 held-out samples".
  static std::string EvalText(const v1::MetricSample& sample);
  // Seconds until the job is done, from the rate of its last two samples.
  static std::optional<double> Eta(const v1::MetricSample& previous,
                                   const v1::MetricSample& latest);

 private:
  void PrintAbove(const std::string& line);
  // Draws the live line, fitted to the terminal's width.
  void DrawLine();
  // A part of the progress line; the higher its priority, the sooner it is left out when
  // the line would not fit.
  struct Segment {
    std::string text;
    int priority;
  };
  std::vector<Segment> ProgressSegments() const;
  // The progress after "job N "; `width` > 0: fitted to that many columns, with a bar
  // if there is room; 0: everything, no bar (a pipe).
  std::string ProgressText(size_t width) const;

  std::FILE* out_;
  const bool terminal_;
  const std::string job_id_;
  const std::function<int()> columns_;
  std::optional<v1::MetricSample> previous_;
  std::optional<v1::MetricSample> latest_;
  bool line_drawn_ = false;
  std::optional<v1::JobState> final_state_;
  std::string device_summary_;
};

}  // namespace stoke::client
