// Conversions between absl::Time and google.protobuf.Timestamp.
#pragma once

#include <google/protobuf/timestamp.pb.h>

#include "absl/time/time.h"

namespace stoke::server {

inline google::protobuf::Timestamp ToProto(absl::Time t) {
  google::protobuf::Timestamp ts;
  const int64_t nanos = absl::ToUnixNanos(t);
  ts.set_seconds(nanos / 1'000'000'000);
  ts.set_nanos(static_cast<int32_t>(nanos % 1'000'000'000));
  return ts;
}

inline absl::Time FromProto(const google::protobuf::Timestamp& ts) {
  return absl::FromUnixSeconds(ts.seconds()) + absl::Nanoseconds(ts.nanos());
}

}  // namespace stoke::server
