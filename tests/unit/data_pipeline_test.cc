// The worker's data pipeline: sampler, loader, device-side preparation.
#include <gtest/gtest.h>

#include "worker/data/epoch_sampler.h"

namespace stoke::worker {
namespace {

TEST(EpochSampler, RefusesABatchLargerThanTheData) {
  EXPECT_THROW(EpochSampler(100, 128, 1, 0, 1, true), std::invalid_argument);
}

}  // namespace
}  // namespace stoke::worker
