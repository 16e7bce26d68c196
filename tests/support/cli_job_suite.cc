#include "tests/support/cli_job_suite.h"

#include <utility>

namespace stoke::testing {

TempDir* CliJobSuite::dir_ = nullptr;
CommandResult* CliJobSuite::made_ = nullptr;
CoordinatorProcess* CliJobSuite::coordinator_ = nullptr;

const std::string& CliJobSuite::DataDir() {
  if (dir_ == nullptr) dir_ = new TempDir();
  return dir_->path();
}

void CliJobSuite::DataMade(CommandResult made) {
  delete made_;
  made_ = new CommandResult(std::move(made));
}

void CliJobSuite::TearDownTestSuite() {
  delete coordinator_;
  coordinator_ = nullptr;
  delete made_;
  made_ = nullptr;
  delete dir_;
  dir_ = nullptr;
}

void CliJobSuite::SetUp() {
  ASSERT_NE(made_, nullptr) << "the suite made no data (DataMade was not called)";
  ASSERT_EQ(made_->exit_code, 0) << made_->out << made_->err;
  if (coordinator_ == nullptr) {
    CoordinatorProcess::Options options{DataDir()};  // data root: <data dir>/datasets
    options.local_workers = "cpu:1";
    coordinator_ = CoordinatorProcess::Start(options).release();
  }
  ASSERT_NE(coordinator_, nullptr);
}

CommandResult CliJobSuite::Stoke(std::vector<std::string> args) {
  args.insert(args.begin(), {STOKE_CLI_BINARY, "--address", coordinator_->address()});
  return RunCommand(args);
}

}  // namespace stoke::testing
