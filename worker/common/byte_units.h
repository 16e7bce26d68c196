// Byte counts as the worker's logs print them, so that every memory figure a job's log
// shows reads the same way ("2.40 GiB").
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

namespace stoke::worker {

// bytes in GiB (2^30) with `decimals` digits after the point, without the unit.
inline std::string FormatGiB(uint64_t bytes, int decimals) {
  char text[32];
  std::snprintf(text, sizeof text, "%.*f", decimals, static_cast<double>(bytes) / (1ull << 30));
  return text;
}

}  // namespace stoke::worker
