// Why the bytes of a request could not be decoded, in words a client can act on. Protobuf
// refuses a proto3 `string` that is not valid UTF-8 by failing the whole parse, without
// saying where; this walks the wire bytes against the message's descriptor to name the
// field (nested path and list index included), the way every other refusal names it.
#pragma once

#include <string>

#include <google/protobuf/descriptor.h>

#include "absl/strings/string_view.h"

namespace stoke::server {

// The path of the first string field in `wire` (an encoding of `type`) that is not valid
// UTF-8, e.g. "spec.model.name" or "tags[2]"; empty when there is none, or when the
// bytes are malformed before one is found.
std::string FindInvalidUtf8(const google::protobuf::Descriptor& type, absl::string_view wire);

// The message for a request of `type` that gRPC could not decode from `wire`:
// "FIELD: not valid UTF-8" where a string is the cause, else that the bytes are no
// encoding of `type`.
std::string DescribeUnparsable(const google::protobuf::Descriptor& type, absl::string_view wire);

// Strict UTF-8, as protobuf checks it: no overlong forms, no surrogates, nothing past
// U+10FFFF.
bool IsValidUtf8(absl::string_view text);

}  // namespace stoke::server
