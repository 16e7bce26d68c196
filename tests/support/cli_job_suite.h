// A suite of tests that train jobs through the CLI, as a user would: one real coordinator
// with one CPU worker serves all of the suite's tests, its data root the suite's folder's
// datasets/. The suite makes its data in its own SetUpTestSuite (under DataDir()) and
// hands how that went to DataMade; each test then checks it and starts the coordinator
// the first time. TearDownTestSuite stops the coordinator and removes the folder.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/support/coordinator_process.h"
#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"

namespace stoke::testing {

class CliJobSuite : public ::testing::Test {
 protected:
  // The suite's folder (made on first use); the coordinator reads data under DataDir()/datasets.
  static const std::string& DataDir();
  // How making the suite's data went; a test fails at once, with its output, if it failed.
  static void DataMade(CommandResult made);
  static void TearDownTestSuite();

  void SetUp() override;

  // `stoke ARGS...` against the suite's coordinator.
  CommandResult Stoke(std::vector<std::string> args);
  CoordinatorProcess& coordinator() { return *coordinator_; }
  // "stoke list --output json": what a refused submission must leave unchanged (the text
  // table's ages change by the second).
  std::string StoredJobs() { return Stoke({"list", "--output", "json"}).out; }

  TempDir files_;  // this test's own files (job specs)

 private:
  static TempDir* dir_;
  static CommandResult* made_;
  static CoordinatorProcess* coordinator_;
};

}  // namespace stoke::testing
