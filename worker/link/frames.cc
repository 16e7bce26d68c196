#include "worker/link/frames.h"

#include <unistd.h>

#include <cerrno>

namespace stoke::worker {
namespace {

bool WriteAll(int fd, const char* data, size_t size) {
  while (size > 0) {
    const ssize_t n = write(fd, data, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

// kMessage: all `size` bytes read; kEnd: none (end of input); kBroken: some.
FrameRead ReadAll(int fd, char* data, size_t size) {
  size_t done = 0;
  while (done < size) {
    const ssize_t n = read(fd, data + done, size - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return FrameRead::kBroken;
    if (n == 0) return done == 0 ? FrameRead::kEnd : FrameRead::kBroken;
    done += static_cast<size_t>(n);
  }
  return FrameRead::kMessage;
}

uint32_t DecodeLength(const unsigned char* bytes) {
  return static_cast<uint32_t>(bytes[0]) | static_cast<uint32_t>(bytes[1]) << 8 |
         static_cast<uint32_t>(bytes[2]) << 16 | static_cast<uint32_t>(bytes[3]) << 24;
}

}  // namespace

std::string EncodeFrame(const google::protobuf::MessageLite& message) {
  std::string frame(4, '\0');
  message.AppendToString(&frame);
  const uint32_t size = static_cast<uint32_t>(frame.size() - 4);
  for (int i = 0; i < 4; ++i) frame[i] = static_cast<char>((size >> (8 * i)) & 0xff);
  return frame;
}

bool WriteFrame(int fd, const google::protobuf::MessageLite& message) {
  if (message.ByteSizeLong() > kMaxFrameBytes) return false;
  const std::string frame = EncodeFrame(message);
  return WriteAll(fd, frame.data(), frame.size());
}

FrameRead ReadFrame(int fd, google::protobuf::MessageLite* message) {
  unsigned char header[4];
  const FrameRead head = ReadAll(fd, reinterpret_cast<char*>(header), sizeof header);
  if (head != FrameRead::kMessage) return head;
  const uint32_t size = DecodeLength(header);
  if (size > kMaxFrameBytes) return FrameRead::kBroken;
  std::string body(size, '\0');
  if (size > 0 && ReadAll(fd, body.data(), size) != FrameRead::kMessage) return FrameRead::kBroken;
  return message->ParseFromString(body) ? FrameRead::kMessage : FrameRead::kBroken;
}

bool FrameDecoder::Next(google::protobuf::MessageLite* message) {
  if (broken_ || buffer_.size() < 4) return false;
  const uint32_t size = DecodeLength(reinterpret_cast<const unsigned char*>(buffer_.data()));
  if (size > kMaxFrameBytes) {
    broken_ = true;
    buffer_.clear();
    return false;
  }
  if (buffer_.size() < 4 + static_cast<size_t>(size)) return false;
  const bool parsed = message->ParseFromArray(buffer_.data() + 4, static_cast<int>(size));
  buffer_.erase(0, 4 + static_cast<size_t>(size));
  if (!parsed) {
    broken_ = true;
    buffer_.clear();
  }
  return parsed;
}

}  // namespace stoke::worker
