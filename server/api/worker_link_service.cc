#include "server/api/worker_link_service.h"

#include <spdlog/spdlog.h>

#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "proto/stoke/v1/limits.h"
#include "server/api/grpc_status.h"
#include "server/api/unparsable_request.h"
#include "server/api/worker_text.h"

namespace stoke::server {
namespace {

class WorkerStream;

// `bytes` decoded as a WorkerMessage; INVALID_ARGUMENT naming the field (a string that
// is not UTF-8) when they are none. Consumes `bytes`.
absl::Status Decode(grpc::ByteBuffer& bytes, v1::WorkerMessage& message) {
  std::vector<grpc::Slice> slices;
  std::string wire;
  if (bytes.Dump(&slices).ok()) {
    for (const grpc::Slice& slice : slices) {
      wire.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
    }
  }
  bytes.Clear();
  if (message.ParseFromString(wire)) return absl::OkStatus();
  return absl::InvalidArgumentError(DescribeUnparsable(*v1::WorkerMessage::descriptor(), wire));
}

// What a worker says of itself ends up in GetCluster answers and metric labels: ids,
// hosts and names are capped like every other id.
absl::Status CheckRegistration(const v1::RegisterWorker& r) {
  const std::pair<const char*, const std::string*> fields[] = {
      {"register.worker_id", &r.worker_id()},
      {"register.host", &r.host()},
      {"register.version", &r.version()},
      {"register.advertise_address", &r.advertise_address()},
      {"register.device.name", &r.device().name()},
      {"register.device.uuid", &r.device().uuid()}};
  for (const auto& [field, value] : fields) {
    if (value->size() > v1::kMaxIdBytes) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": at most ", v1::kMaxIdBytes, " bytes"));
    }
  }
  // proto3 keeps numbers it has no name for; a device of an unknown type would be
  // scheduled as neither a CPU nor a GPU.
  const v1::DeviceType type = r.device().type();
  if (type != v1::DEVICE_TYPE_CPU && type != v1::DEVICE_TYPE_CUDA) {
    return absl::InvalidArgumentError(
        absl::StrCat("register.device.type: ", static_cast<int>(type), "; must be CPU or CUDA"));
  }
  return absl::OkStatus();
}

// Text a worker sends about its task (errors, log lines) is stored with the job and
// answered to every ListJobs: it is cut to kMaxReasonBytes rather than refused, so that
// a worker's report of a failure is never lost for being long.
void Truncate(std::string* text) {
  if (text->size() <= v1::kMaxReasonBytes) return;
  const size_t cut = text->size() - v1::kMaxReasonBytes;
  text->resize(v1::kMaxReasonBytes);
  absl::StrAppend(text, "... (", cut, " more bytes)");
}

void BoundTaskText(v1::WorkerMessage& message) {
  switch (message.kind_case()) {
    case v1::WorkerMessage::kFinished:
      Truncate(message.mutable_finished()->mutable_message());
      break;
    case v1::WorkerMessage::kLeaving:
      Truncate(message.mutable_leaving()->mutable_reason());
      break;
    case v1::WorkerMessage::kReport:
      for (auto& line : *message.mutable_report()->mutable_logs()) Truncate(line.mutable_text());
      break;
    default:
      break;
  }
}

// What the core holds: outlives the stream, and goes quiet once the stream is finished.
// Every operation on the stream (read, write, finish) is started here, under one mutex,
// and none once Finish has been called: gRPC runs OnDone when its count of outstanding
// operations reaches zero, and an operation started after that (a job assigned to a
// worker whose stream is closing) brings a second OnDone on a reactor already deleted.
class StreamConnection final : public WorkerConnection {
 public:
  explicit StreamConnection(WorkerStream* stream) : stream_(stream) {}
  void Send(const v1::CoordinatorMessage& message) override;
  void Close(const std::string& reason) override;
  // Finishes the stream once; later calls (and every read or write after it) do nothing.
  void Finish(grpc::Status status);
  // Starts the next read; false once the stream is finished.
  bool StartRead(grpc::ByteBuffer* message);
  // The stream's write finished; start the next one.
  void OnWriteDone(bool ok);
  // OnDone: the stream is about to be deleted.
  void Detach();

 private:
  bool Open() const { return stream_ != nullptr && !finished_; }

  std::mutex mu_;
  WorkerStream* stream_;
  bool finished_ = false;
  std::deque<v1::CoordinatorMessage> outbox_;
  v1::CoordinatorMessage current_;  // must outlive its write
  bool writing_ = false;
};

// Reads arrive as bytes and are decoded here: a message gRPC could not decode itself (a
// string that is not UTF-8) would read as the worker closing its stream, with no word
// of why.
class WorkerStream final
    : public grpc::ServerBidiReactor<grpc::ByteBuffer, v1::CoordinatorMessage> {
 public:
  // A stream whose caller could not be identified ends at once with that status.
  WorkerStream(Coordinator& core, Executor& executor, AuditLog& audit, std::string peer,
               absl::StatusOr<Caller> caller)
      : core_(core),
        executor_(executor),
        audit_(audit),
        peer_(std::move(peer)),
        connection_(std::make_shared<StreamConnection>(this)) {
    if (!caller.ok()) {
      Post([this, status = caller.status()] {  // the store is not written on gRPC's thread
        // A refusal only counted (one of many from that host) gets no line of its own.
        if (audit_.Record(Caller{"?", security::Role::kWorker, peer_}, "Attach", "", status)) {
          spdlog::warn("worker link from {} refused: {}", peer_, status.ToString());
        }
      });
      connection_->Finish(ToGrpcStatus(caller.status()));
      return;
    }
    caller_ = *std::move(caller);
    connection_->StartRead(&incoming_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      // The worker closed the stream or it broke: the worker is gone.
      Post([this] {
        if (!worker_id_.empty()) core_.DetachWorker(worker_id_, connection_.get(), "link closed");
        connection_->Finish(grpc::Status::OK);
      });
      return;
    }
    v1::WorkerMessage message;
    if (absl::Status s = Decode(incoming_, message); !s.ok()) {
      Post([this, s] {
        const std::string why(s.message());
        spdlog::warn("worker link from {} ended: {}", peer_, why);
        if (!worker_id_.empty()) {
          core_.DetachWorker(worker_id_, connection_.get(), "bad message",
                             /*may_reconnect=*/false);
        }
        connection_->Finish(ToGrpcStatus(s));
      });
      return;
    }
    Post([this, message = std::move(message)]() mutable {
      BoundTaskText(message);
      SanitizeWorkerMessage(message);
      if (Handle(message)) connection_->StartRead(&incoming_);
    });
  }

  void OnWriteDone(bool ok) override { connection_->OnWriteDone(ok); }
  void OnCancel() override { connection_->Finish(grpc::Status::CANCELLED); }

  void OnDone() override {
    connection_->Detach();
    std::unique_lock<std::mutex> lock(mu_);
    done_ = true;
    // A stream cancelled while its last message was being handled has no read left to
    // fail, so OnReadDone never reports it closed: the worker goes here (or, if its
    // registration is still being handled, there, once it sees done_).
    if (!worker_id_.empty()) {
      ++pending_tasks_;
      executor_.Post([this, id = worker_id_] {
        core_.DetachWorker(id, connection_.get(), "link closed");
        std::unique_lock<std::mutex> task_lock(mu_);
        if (--pending_tasks_ == 0) {
          task_lock.unlock();
          delete this;
        }
      });
    }
    if (pending_tasks_ > 0) return;  // the last task deletes us
    lock.unlock();
    delete this;
  }

 private:
  // Returns false when the stream is to end.
  bool Handle(const v1::WorkerMessage& message) {
    if (worker_id_.empty()) {
      if (!message.has_register_()) {
        connection_->Finish(grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                                         "the first message on a worker link must be register"));
        return false;
      }
      absl::Status s = CheckRegistration(message.register_());
      if (s.ok()) s = AccessControl::RequireHostOf(caller_, message.register_().worker_id());
      // Without authentication there is no credential to bind the id to.
      const std::string credential = caller_.name == "anonymous" ? "" : caller_.name;
      if (s.ok()) {
        s = core_.AttachWorker(message.register_(), PeerHost(peer_), connection_, credential);
      }
      const bool recorded = audit_.Record(caller_, "Attach", message.register_().worker_id(), s);
      if (!s.ok()) {
        if (recorded) spdlog::warn("worker registration from {} refused: {}", peer_, s.ToString());
        connection_->Finish(ToGrpcStatus(s));
        return false;
      }
      bool gone;
      {
        std::lock_guard<std::mutex> lock(mu_);
        worker_id_ = message.register_().worker_id();
        gone = done_;
      }
      if (gone) {
        core_.DetachWorker(worker_id_, connection_.get(), "link closed");
        return false;
      }
      return true;
    }
    core_.HandleWorkerMessage(worker_id_, message);
    return true;
  }

  void Post(std::function<void()> task) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++pending_tasks_;
    }
    executor_.Post([this, task = std::move(task)] {
      task();
      std::unique_lock<std::mutex> lock(mu_);
      if (--pending_tasks_ == 0 && done_) {
        lock.unlock();
        delete this;
      }
    });
  }

  Coordinator& core_;
  Executor& executor_;
  AuditLog& audit_;
  const std::string peer_;
  Caller caller_;
  std::shared_ptr<StreamConnection> connection_;
  grpc::ByteBuffer incoming_;
  std::string worker_id_;  // set once registered (under mu_, which OnDone reads it under)

  std::mutex mu_;
  int pending_tasks_ = 0;
  bool done_ = false;
};

void StreamConnection::Send(const v1::CoordinatorMessage& message) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!Open()) return;
  if (writing_) {
    outbox_.push_back(message);
    return;
  }
  current_ = message;
  writing_ = true;
  stream_->StartWrite(&current_);
}

void StreamConnection::OnWriteDone(bool ok) {
  std::lock_guard<std::mutex> lock(mu_);
  writing_ = false;
  if (!ok || !Open() || outbox_.empty()) return;
  current_ = std::move(outbox_.front());
  outbox_.pop_front();
  writing_ = true;
  stream_->StartWrite(&current_);
}

bool StreamConnection::StartRead(grpc::ByteBuffer* message) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!Open()) return false;
  stream_->StartRead(message);
  return true;
}

void StreamConnection::Finish(grpc::Status status) {
  // Holding mu_ keeps the stream from being deleted (OnDone -> Detach) meanwhile.
  std::lock_guard<std::mutex> lock(mu_);
  if (!Open()) return;
  finished_ = true;
  outbox_.clear();
  stream_->Finish(std::move(status));
}

void StreamConnection::Close(const std::string& reason) {
  Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, reason));
}

void StreamConnection::Detach() {
  std::lock_guard<std::mutex> lock(mu_);
  stream_ = nullptr;
  outbox_.clear();
}

}  // namespace

WorkerLinkService::WorkerLinkService(Coordinator& core, Executor& executor,
                                     const AccessControl& access, AuditLog& audit)
    : core_(core), executor_(executor), access_(access), audit_(audit) {
  // In place of the generated handler, one that hands the stream's messages over as bytes.
  MarkMethodCallback(
      0, new grpc::internal::CallbackBidiHandler<grpc::ByteBuffer, v1::CoordinatorMessage>(
             [this](grpc::CallbackServerContext* context) { return AttachLink(context); }));
}

grpc::ServerBidiReactor<grpc::ByteBuffer, v1::CoordinatorMessage>* WorkerLinkService::AttachLink(
    grpc::CallbackServerContext* context) {
  return new WorkerStream(core_, executor_, audit_, context->peer(),
                          access_.IdentifyWorker(*context));
}

}  // namespace stoke::server
