// "Did you mean": the known name nearest a mistyped one, for the CLI's messages.
#pragma once

#include <string>
#include <vector>

namespace stoke::client {

// The name among `known` fewest single-character edits (insert, delete, replace, swap
// of neighbours) from `typed`, when that is at most a third of its length (and at least
// 1); "" when none is that close.
std::string NearestName(const std::string& typed, const std::vector<std::string>& known);

}  // namespace stoke::client
