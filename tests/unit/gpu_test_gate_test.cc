// How a GPU test decides to run: a Stoke program that crashes while listing its devices is
// a failure naming the signal, never a reason to skip (tests/support/cuda_driver.h).
#include <gtest/gtest.h>

#include "tests/support/cuda_driver.h"

namespace stoke::testing {
namespace {

TEST(GpuTestGate, AProgramKilledBySegfaultIsNamedNotSkipped) {
  const std::string why = WhyProgramDoesNotSee({"/bin/sh", "-c", "kill -SEGV $$"}, "cuda:0");
  EXPECT_NE(why.find("signal 11 (SIGSEGV)"), std::string::npos) << why;
}

TEST(GpuTestGate, AProgramThatFailsOrListsNoGpuIsNamed) {
  EXPECT_NE(WhyProgramDoesNotSee({"/bin/sh", "-c", "echo bad flag >&2; exit 2"}, "cuda:0")
                .find("exited 2: bad flag"),
            std::string::npos);
  EXPECT_NE(
      WhyProgramDoesNotSee({"/bin/sh", "-c", "echo cpu:0"}, "cuda:0").find("does not list cuda:0"),
      std::string::npos);
  EXPECT_EQ(WhyProgramDoesNotSee({"/bin/sh", "-c", "echo 'cpu:0 cuda:0'"}, "cuda:0"), "");
}

}  // namespace
}  // namespace stoke::testing
