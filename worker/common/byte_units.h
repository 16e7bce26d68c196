// Byte counts as the worker's logs print them, so that every memory figure a job's log
// shows reads the same way ("2.40 GiB"), and as its flags take them ("16G").
#pragma once

#include <cctype>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <string>

namespace stoke::worker {

// bytes in GiB (2^30) with `decimals` digits after the point, without the unit.
inline std::string FormatGiB(uint64_t bytes, int decimals) {
  char text[32];
  std::snprintf(text, sizeof text, "%.*f", decimals, static_cast<double>(bytes) / (1ull << 30));
  return text;
}

// "67108864", "64M", "64MiB", "2g": binary multiples, as the memory figures are. False for
// anything else, and for a count that does not fit 64 bits.
inline bool ParseByteCount(const std::string& text, uint64_t* bytes) {
  size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
  std::string unit = text.substr(digits);
  for (char& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  int shift = 0;
  if (!unit.empty() && unit != "B") {
    const size_t at = std::string("KMGT").find(unit[0]);
    if (at == std::string::npos ||
        (unit.size() > 1 && unit.substr(1) != "B" && unit.substr(1) != "IB")) {
      return false;
    }
    shift = 10 * static_cast<int>(at + 1);
  }
  if (digits == 0 || digits > 20) return false;
  const uint64_t max = std::numeric_limits<uint64_t>::max() >> shift;
  uint64_t count = 0;
  for (size_t i = 0; i < digits; ++i) {
    const uint64_t digit = static_cast<uint64_t>(text[i] - '0');
    if (count > (max - digit) / 10) return false;
    count = count * 10 + digit;
  }
  *bytes = count << shift;
  return true;
}

}  // namespace stoke::worker
