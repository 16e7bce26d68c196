// Messages over a pipe between the worker and its trainer process: 4 bytes of
// little-endian length, then the serialized message. Blocking writes and reads for the
// trainer, and an incremental decoder for the worker's poll loop.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include <google/protobuf/message_lite.h>

namespace stoke::worker {

// The largest frame either side accepts: an assignment with 8 MiB of code, and room.
inline constexpr uint32_t kMaxFrameBytes = 32u << 20;

// The frame's bytes: length, then message.
std::string EncodeFrame(const google::protobuf::MessageLite& message);

// False when the pipe is closed or broken (the other side is gone).
bool WriteFrame(int fd, const google::protobuf::MessageLite& message);

enum class FrameRead { kMessage, kEnd, kBroken };
// Blocks for one whole frame. kEnd: the pipe closed between frames; kBroken: within one,
// or a frame that is too large or does not parse.
FrameRead ReadFrame(int fd, google::protobuf::MessageLite* message);

// Bytes as they arrive, frames as they complete.
class FrameDecoder {
 public:
  void Append(const char* data, size_t size) { buffer_.append(data, size); }
  // The next whole frame into `message`: false when none is complete yet. Sets broken()
  // on a frame too large or unparsable (the rest is then dropped).
  bool Next(google::protobuf::MessageLite* message);
  bool broken() const { return broken_; }

 private:
  std::string buffer_;
  bool broken_ = false;
};

}  // namespace stoke::worker
