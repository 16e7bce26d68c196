// The writes of a gRPC callback reactor's stream, one at a time: gRPC allows a single
// write in flight, so a message sent meanwhile waits, in order, until the one before it
// is done. The reactor calls StartWrite with what Push and Done return. Not thread-safe:
// the reactor's own mutex guards it.
#pragma once

#include <deque>
#include <utility>

namespace stoke::client {

template <typename Message>
class SerialWrites {
 public:
  // The message to write now, or nullptr when a write is in flight (it is queued).
  const Message* Push(Message message) {
    if (writing_) {
      waiting_.push_back(std::move(message));
      return nullptr;
    }
    current_ = std::move(message);
    writing_ = true;
    return &current_;
  }

  // The write in flight is done: the next message to write, or nullptr. A failed write
  // (the stream is ending) drops what waits.
  const Message* Done(bool ok) {
    writing_ = false;
    if (!ok) waiting_.clear();
    if (waiting_.empty()) return nullptr;
    current_ = std::move(waiting_.front());
    waiting_.pop_front();
    writing_ = true;
    return &current_;
  }

  // No write in flight.
  bool idle() const { return !writing_; }

 private:
  std::deque<Message> waiting_;
  Message current_;  // the write in flight; gRPC reads it until the write is done
  bool writing_ = false;
};

}  // namespace stoke::client
