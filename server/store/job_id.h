// Job ids as every store writes them: decimal row ids with no sign, padding or leading
// zero. "01" or "+1" name no job, so that every RPC agrees on what an id means.
#pragma once

#include <charconv>
#include <cstdint>
#include <string>

namespace stoke::server {

inline bool ParseJobId(const std::string& id, int64_t* out) {
  if (id.empty() || id.size() > 18 || id[0] < '1' || id[0] > '9') return false;
  auto [end, ec] = std::from_chars(id.data(), id.data() + id.size(), *out);
  return ec == std::errc() && end == id.data() + id.size() && *out > 0;
}

}  // namespace stoke::server
