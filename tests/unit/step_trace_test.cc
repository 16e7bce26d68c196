// The opt-in trace of a real job's steps (STOKE_TRACE_DIR, STOKE_TRACE_STEPS): off unless
// asked for, a bad step range is named and ignored, and a trace that cannot be taken or
// written is reported without stopping the job. (Debian's CPU LibTorch has no Kineto, so
// here the trace is expected to be reported as impossible; on the GPU machine it is
// written.)
#include "worker/runtime/step_trace.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <torch/torch.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "tests/support/temp_dir.h"

namespace stoke::worker {
namespace {

class StepTraceTest : public ::testing::Test {
 protected:
  void TearDown() override {
    unsetenv("STOKE_TRACE_DIR");
    unsetenv("STOKE_TRACE_STEPS");
  }
  // Runs steps 1..4 as a trainer would, with a little work in each.
  void RunSteps(StepTrace& trace) {
    for (uint64_t step = 1; step <= 4; ++step) {
      trace.BeforeStep(step);
      torch::Tensor x = torch::randn({32, 32});
      (void)x.mm(x).sum().item<float>();
      trace.AfterStep(step);
    }
  }
  static bool Exists(const std::string& path) {
    struct stat info {};
    return stat(path.c_str(), &info) == 0;
  }

  testing::TempDir dir_;
  std::vector<std::string> log_;
  StepTrace::Log log_to_vector_ = [this](const std::string& line) { log_.push_back(line); };
};

TEST_F(StepTraceTest, OffUnlessTheDirectoryIsSet) {
  setenv("STOKE_TRACE_STEPS", "2,1", 1);
  StepTrace trace("7", 0, log_to_vector_);
  RunSteps(trace);
  EXPECT_TRUE(log_.empty());
}

TEST_F(StepTraceTest, AStepRangeThatIsNotFirstCommaCountIsNamedAndNothingIsTraced) {
  setenv("STOKE_TRACE_DIR", dir_.path().c_str(), 1);
  setenv("STOKE_TRACE_STEPS", "sixty", 1);
  StepTrace trace("7", 1, log_to_vector_);
  RunSteps(trace);
  ASSERT_EQ(log_.size(), 1u);
  EXPECT_NE(log_[0].find("STOKE_TRACE_STEPS=\"sixty\""), std::string::npos) << log_[0];
  EXPECT_FALSE(Exists(dir_.File("trace-7-rank1.json")));
}

TEST_F(StepTraceTest, TracesTheStepsAskedForOrSaysWhyItCannot) {
  setenv("STOKE_TRACE_DIR", dir_.path().c_str(), 1);
  setenv("STOKE_TRACE_STEPS", "2,2", 1);
  StepTrace trace("7", 1, log_to_vector_);
  RunSteps(trace);  // steps 3 and 4 pass the trace by; the training loop goes on
  ASSERT_EQ(log_.size(), 1u);
  const std::string path = dir_.File("trace-7-rank1.json");
  if (Exists(path)) {
    EXPECT_NE(log_[0].find("steps 2-3 written to " + path), std::string::npos) << log_[0];
  } else {
    EXPECT_NE(log_[0].find("kernel trace"), std::string::npos) << log_[0];
  }
}

}  // namespace
}  // namespace stoke::worker
