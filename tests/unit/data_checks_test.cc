// Submission-time checks of data files.
#include "server/api/data_checks.h"

#include <gtest/gtest.h>

namespace stoke::server {
namespace {

TEST(DataChecks, RelativePathsAreRefused) {
  DataRoots roots({"/tmp"});
  auto resolved = roots.Resolve("data.mnist.path", "relative/path");
  ASSERT_FALSE(resolved.ok());
  EXPECT_NE(resolved.status().message().find("data.mnist.path"), absl::string_view::npos);
}

}  // namespace
}  // namespace stoke::server
