#include "server/api/unparsable_request.h"

#include <cstdint>
#include <map>

#include "absl/strings/str_cat.h"

namespace stoke::server {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;

// As deep as protobuf's own parser goes before it gives up.
constexpr int kMaxDepth = 100;

enum class Walk { kClean, kFound, kMalformed };

// The wire format's primitives over a shrinking view of the bytes.
class WireReader {
 public:
  explicit WireReader(absl::string_view bytes) : rest_(bytes) {}
  bool AtEnd() const { return rest_.empty(); }

  bool Varint(uint64_t* value) {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (rest_.empty()) return false;
      const auto byte = static_cast<uint8_t>(rest_.front());
      rest_.remove_prefix(1);
      v |= static_cast<uint64_t>(byte & 0x7f) << shift;
      if ((byte & 0x80) == 0) {
        *value = v;
        return true;
      }
    }
    return false;
  }

  bool Take(uint64_t n, absl::string_view* out) {
    if (n > rest_.size()) return false;
    *out = rest_.substr(0, static_cast<size_t>(n));
    rest_.remove_prefix(static_cast<size_t>(n));
    return true;
  }

 private:
  absl::string_view rest_;
};

bool SkipGroup(WireReader& in, uint64_t number, int depth);

// Skips a field's value of `wire_type` (never a length-delimited one's, read by the caller).
bool SkipValue(WireReader& in, uint64_t number, int wire_type, int depth) {
  uint64_t ignored = 0;
  absl::string_view skipped;
  switch (wire_type) {
    case 0:
      return in.Varint(&ignored);
    case 1:
      return in.Take(8, &skipped);
    case 5:
      return in.Take(4, &skipped);
    case 3:
      return SkipGroup(in, number, depth + 1);
    default:
      return false;
  }
}

// A group (proto2's, seen only as an unknown field here) up to its matching end.
bool SkipGroup(WireReader& in, uint64_t number, int depth) {
  if (depth > kMaxDepth) return false;
  while (!in.AtEnd()) {
    uint64_t tag = 0;
    if (!in.Varint(&tag)) return false;
    const int wire_type = static_cast<int>(tag & 7);
    if (wire_type == 4) return (tag >> 3) == number;
    if (wire_type == 2) {
      uint64_t length = 0;
      absl::string_view skipped;
      if (!in.Varint(&length) || !in.Take(length, &skipped)) return false;
    } else if (!SkipValue(in, tag >> 3, wire_type, depth)) {
      return false;
    }
  }
  return false;
}

Walk FindIn(const Descriptor& type, absl::string_view wire, const std::string& prefix, int depth,
            std::string* path) {
  if (depth > kMaxDepth) return Walk::kMalformed;
  WireReader in(wire);
  std::map<uint64_t, int> seen;  // occurrences of each field so far: a list's index
  while (!in.AtEnd()) {
    uint64_t tag = 0;
    if (!in.Varint(&tag)) return Walk::kMalformed;
    const uint64_t number = tag >> 3;
    const int wire_type = static_cast<int>(tag & 7);
    if (number == 0 || number > FieldDescriptor::kMaxNumber) return Walk::kMalformed;
    if (wire_type != 2) {
      if (!SkipValue(in, number, wire_type, depth)) return Walk::kMalformed;
      continue;
    }
    uint64_t length = 0;
    absl::string_view payload;
    if (!in.Varint(&length) || !in.Take(length, &payload)) return Walk::kMalformed;
    const FieldDescriptor* field = type.FindFieldByNumber(static_cast<int>(number));
    if (field == nullptr) continue;  // unknown fields are kept as bytes, never checked
    std::string name = prefix + field->name();
    if (field->is_repeated()) absl::StrAppend(&name, "[", seen[number]++, "]");
    if (field->type() == FieldDescriptor::TYPE_STRING) {
      if (!IsValidUtf8(payload)) {
        *path = std::move(name);
        return Walk::kFound;
      }
    } else if (field->type() == FieldDescriptor::TYPE_MESSAGE) {
      const Walk inner = FindIn(*field->message_type(), payload, name + ".", depth + 1, path);
      if (inner != Walk::kClean) return inner;
    }
  }
  return Walk::kClean;
}

}  // namespace

bool IsValidUtf8(absl::string_view text) {
  const auto* p = reinterpret_cast<const uint8_t*>(text.data());
  const uint8_t* const end = p + text.size();
  while (p < end) {
    const uint8_t lead = *p;
    if (lead < 0x80) {
      ++p;
      continue;
    }
    int more = 0;
    // The bounds of the second byte, narrower than 80..BF where a wider one would be an
    // overlong form, a surrogate or past U+10FFFF.
    uint8_t low = 0x80, high = 0xBF;
    if (lead >= 0xC2 && lead <= 0xDF) {
      more = 1;
    } else if (lead >= 0xE0 && lead <= 0xEF) {
      more = 2;
      if (lead == 0xE0) low = 0xA0;
      if (lead == 0xED) high = 0x9F;
    } else if (lead >= 0xF0 && lead <= 0xF4) {
      more = 3;
      if (lead == 0xF0) low = 0x90;
      if (lead == 0xF4) high = 0x8F;
    } else {
      return false;
    }
    if (end - p <= more) return false;
    if (p[1] < low || p[1] > high) return false;
    for (int i = 2; i <= more; ++i) {
      if (p[i] < 0x80 || p[i] > 0xBF) return false;
    }
    p += more + 1;
  }
  return true;
}

std::string FindInvalidUtf8(const Descriptor& type, absl::string_view wire) {
  std::string path;
  return FindIn(type, wire, "", 0, &path) == Walk::kFound ? path : std::string();
}

std::string DescribeUnparsable(const Descriptor& type, absl::string_view wire) {
  const std::string field = FindInvalidUtf8(type, wire);
  if (!field.empty()) return absl::StrCat(field, ": not valid UTF-8");
  return absl::StrCat("request: not a valid encoding of ", type.full_name());
}

}  // namespace stoke::server
