// A TrainingObserver that keeps what the engine reports, for tests that run it directly.
#pragma once

#include <string>
#include <vector>

#include "worker/common/task.h"

namespace stoke::testing {

class RecordingObserver final : public worker::TrainingObserver {
 public:
  void OnStarted() override { ++started; }
  void OnMetrics(const worker::MetricSample& sample) override {
    (sample.eval ? evals : samples).push_back(sample);
  }
  void OnLog(const std::string& line) override { logs.push_back(line); }
  void OnFirstStep(const worker::StartupTimes& times) override { first_steps.push_back(times); }

  int started = 0;
  std::vector<worker::StartupTimes> first_steps;
  std::vector<worker::MetricSample> samples;  // training windows
  std::vector<worker::MetricSample> evals;    // held-out evaluations
  std::vector<std::string> logs;
};

}  // namespace stoke::testing
