// An exception raised by the user's own code (a Python model's factory or forward): what
// the job's message says (the exception's type and message) apart from the traceback that
// goes to the job's log. Torch-free: the loop classifies it without knowing Python.
#pragma once

#include <stdexcept>
#include <string>
#include <utility>

namespace stoke::worker {

class UserCodeError : public std::runtime_error {
 public:
  UserCodeError(const std::string& message, std::string traceback)
      : std::runtime_error(message), traceback_(std::move(traceback)) {}
  const std::string& traceback() const { return traceback_; }

 private:
  std::string traceback_;
};

}  // namespace stoke::worker
