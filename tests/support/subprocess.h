// Runs a program to completion and captures its exit code, stdout and stderr: for
// testing the CLI as a user runs it.
#pragma once

#include <string>
#include <vector>

namespace stoke::testing {

struct CommandResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};

CommandResult RunCommand(const std::vector<std::string>& argv,
                         const std::vector<std::string>& extra_env = {});

}  // namespace stoke::testing
