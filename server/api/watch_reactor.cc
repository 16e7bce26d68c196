#include "server/api/watch_reactor.h"

#include "server/api/access_control.h"
#include "server/api/grpc_status.h"

namespace stoke::server {
namespace {

// Events read from the hub per batch: large enough to amortise a store read on a
// backlog, small enough that a stalled watcher holds little.
constexpr uint32_t kBatch = 256;

}  // namespace

WatchReactor* WatchReactor::Fail(EventHub& hub, Executor& executor, grpc::Status status) {
  auto* reactor = new WatchReactor(hub, executor, "", 0, false);
  reactor->FinishOnce(std::move(status));
  return reactor;
}

WatchReactor* WatchReactor::Start(EventHub& hub, Executor& executor, std::string job_id,
                                  uint64_t from_seq, bool include_logs,
                                  std::unique_ptr<StreamQuota::Lease> lease) {
  auto* reactor = new WatchReactor(hub, executor, std::move(job_id), from_seq, include_logs);
  reactor->lease_ = std::move(lease);
  if (reactor->job_id_.empty()) {
    reactor->FinishOnce(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "id: required"));
    return reactor;
  }
  {
    // OnDone cannot run before this handler returns, but a listener call can: it finds
    // the reactor's state guarded.
    std::lock_guard<std::mutex> lock(reactor->mu_);
    reactor->subscription_ = hub.Subscribe(reactor->job_id_, [reactor] { reactor->Wake(); });
  }
  reactor->Wake();
  return reactor;
}

WatchReactor::WatchReactor(EventHub& hub, Executor& executor, std::string job_id, uint64_t from_seq,
                           bool include_logs)
    : hub_(hub),
      executor_(executor),
      job_id_(std::move(job_id)),
      include_logs_(include_logs),
      next_seq_(from_seq) {}

void WatchReactor::Wake() {
  std::lock_guard<std::mutex> lock(mu_);
  if (finished_) return;
  if (filling_ || writing_ || !buffer_.empty()) {
    wake_pending_ = true;
    return;
  }
  filling_ = true;
  executor_.Post([this] { Fill(); });
}

void WatchReactor::Fill() {
  uint64_t from;
  bool skip;
  {
    std::lock_guard<std::mutex> lock(mu_);
    from = next_seq_;
    skip = finished_;
  }
  auto read = skip ? absl::StatusOr<EventHub::ReadResult>(absl::CancelledError())
                   : hub_.Read(job_id_, from, kBatch);
  bool finish = false;
  grpc::Status status;
  {
    std::unique_lock<std::mutex> lock(mu_);
    filling_ = false;
    if (done_) {
      lock.unlock();
      delete this;
      return;
    }
    if (finished_) return;
    if (!read.ok()) {
      finish = true;
      status = ToGrpcStatus(read.status());
    } else {
      // A full batch may have left more behind it. Nothing else would ask for it once the
      // job has finished (no new event wakes us), so read on when this batch is written.
      if (read->events.size() >= kBatch && !read->end_of_stream) wake_pending_ = true;
      // The next read starts after this batch, whether or not its events are sent.
      if (!read->events.empty()) next_seq_ = read->events.back().seq() + 1;
      for (auto& event : read->events) {
        // A non-owner's view: no log lines, and no paths in the messages of state changes.
        if (!include_logs_ && event.has_log()) continue;
        if (!include_logs_ && event.has_state_change()) {
          auto* change = event.mutable_state_change();
          change->set_message(RedactPaths(change->message()));
        }
        buffer_.push_back(std::move(event));
      }
      end_of_stream_ = read->end_of_stream;
      finish = AdvanceLocked();
    }
  }
  if (finish) FinishOnce(status);
}

bool WatchReactor::AdvanceLocked() {
  if (finished_ || writing_ || filling_) return false;
  if (!buffer_.empty()) {
    current_ = std::move(buffer_.front());
    buffer_.pop_front();
    writing_ = true;
    StartWrite(&current_);
    return false;
  }
  if (end_of_stream_) return true;
  // Nothing buffered: read again if the hub signalled meanwhile, else wait for it.
  if (wake_pending_) {
    wake_pending_ = false;
    filling_ = true;
    executor_.Post([this] { Fill(); });
  }
  return false;
}

void WatchReactor::OnWriteDone(bool ok) {
  bool finish;
  {
    std::lock_guard<std::mutex> lock(mu_);
    writing_ = false;
    if (!ok || cancelled_) {
      // The client went away. A write it had already received can complete with ok after
      // OnCancel has run (and left the call to us, as a write was out): end it now, or
      // the call never ends and the server's shutdown waits for it forever.
      ok = false;
      finish = !finished_;
    } else {
      finish = AdvanceLocked();
    }
  }
  if (finish) FinishOnce(ok ? grpc::Status::OK : grpc::Status::CANCELLED);
}

void WatchReactor::OnCancel() {
  bool finish;
  {
    std::lock_guard<std::mutex> lock(mu_);
    cancelled_ = true;
    finish = !finished_ && !writing_;
  }
  if (finish) FinishOnce(grpc::Status::CANCELLED);
}

void WatchReactor::FinishOnce(grpc::Status status) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (finished_) return;
    finished_ = true;
  }
  Finish(std::move(status));
}

void WatchReactor::OnDone() {
  uint64_t subscription;
  {
    std::lock_guard<std::mutex> lock(mu_);
    subscription = subscription_;
  }
  // No listener call runs after this returns, so none can Wake a deleted reactor.
  if (subscription) hub_.Unsubscribe(subscription);
  std::unique_lock<std::mutex> lock(mu_);
  done_ = true;
  if (filling_) return;  // the Fill in flight deletes us
  lock.unlock();
  delete this;
}

}  // namespace stoke::server
