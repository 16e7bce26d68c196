#include "server/api/file_stream_reactor.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>

namespace stoke::server {
namespace {

constexpr size_t kChunkBytes = 1 << 20;

}  // namespace

FileStreamReactor* FileStreamReactor::Start(Executor& executor, std::string path, uint64_t step) {
  auto* reactor = new FileStreamReactor(&executor, std::move(path), step);
  reactor->reading_ = true;
  executor.Post([reactor] { reactor->ReadNext(); });
  return reactor;
}

FileStreamReactor::~FileStreamReactor() {
  if (file_) std::fclose(file_);
}

FileStreamReactor* FileStreamReactor::Fail(grpc::Status status) {
  auto* reactor = new FileStreamReactor(nullptr, "", 0);
  reactor->FinishOnce(std::move(status));
  return reactor;
}

void FileStreamReactor::ReadNext() {
  grpc::Status failure;
  bool end = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!finished_) {
      chunk_.Clear();
      const bool first = file_ == nullptr;
      if (first) {
        file_ = std::fopen(path_.c_str(), "rb");
        struct stat st;
        if (file_ == nullptr || fstat(fileno(file_), &st) != 0) {
          failure = grpc::Status(grpc::StatusCode::UNAVAILABLE,
                                 path_ + ": cannot read: " + std::strerror(errno));
        } else {
          chunk_.set_total_bytes(static_cast<uint64_t>(st.st_size));
          chunk_.set_step(step_);
        }
      }
      if (failure.ok()) {
        std::string* data = chunk_.mutable_data();
        data->resize(kChunkBytes);
        const size_t n = std::fread(data->data(), 1, kChunkBytes, file_);
        data->resize(n);
        // The first chunk goes out even when empty: it carries the size and step.
        end = n == 0 && !first;
      }
    }
  }
  {
    std::unique_lock<std::mutex> lock(mu_);
    reading_ = false;
    if (done_) {
      lock.unlock();
      delete this;
      return;
    }
    if (finished_) return;
  }
  if (!failure.ok()) {
    FinishOnce(failure);
  } else if (end) {
    FinishOnce(grpc::Status::OK);
  } else {
    StartWrite(&chunk_);
  }
}

void FileStreamReactor::OnWriteDone(bool ok) {
  if (!ok) {
    FinishOnce(grpc::Status::CANCELLED);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (finished_) return;
    reading_ = true;
  }
  executor_->Post([this] { ReadNext(); });
}

void FileStreamReactor::OnCancel() {
  bool finish;
  {
    std::lock_guard<std::mutex> lock(mu_);
    finish = !reading_;
  }
  if (finish) FinishOnce(grpc::Status::CANCELLED);
}

void FileStreamReactor::FinishOnce(grpc::Status status) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (finished_) return;
    finished_ = true;
  }
  Finish(std::move(status));
}

void FileStreamReactor::OnDone() {
  std::unique_lock<std::mutex> lock(mu_);
  done_ = true;
  if (reading_) return;  // the read in flight deletes us
  lock.unlock();
  delete this;
}

}  // namespace stoke::server
