// The status of a data file that could not be opened: one that is there but is no regular
// file (a folder, a FIFO) is a mistake in the spec (INVALID_ARGUMENT: no retry helps); one
// that cannot be opened may yet appear, a filesystem not mounted yet (NOT_FOUND: a later
// attempt may succeed).
#pragma once

#include <string>

#include "absl/status/status.h"

namespace stoke::data {

inline absl::Status OpenFailure(bool not_regular, const std::string& message) {
  return not_regular ? absl::InvalidArgumentError(message) : absl::NotFoundError(message);
}

}  // namespace stoke::data
