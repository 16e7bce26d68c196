#include "server/api/file_stream_reactor.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "files/rooted_open.h"

namespace stoke::server {
namespace {

constexpr size_t kChunkBytes = 1 << 20;
// No export is larger: a model's weights, however large, are not this.
constexpr long long kMaxFileBytes = 1ll << 40;

}  // namespace

FileStreamReactor* FileStreamReactor::Start(Executor& executor, std::string root, std::string path,
                                            uint64_t step) {
  auto* reactor = new FileStreamReactor(&executor, std::move(root), std::move(path), step);
  reactor->reading_ = true;
  executor.Post([reactor] { reactor->ReadNext(); });
  return reactor;
}

FileStreamReactor::~FileStreamReactor() {
  if (fd_ >= 0) close(fd_);
}

FileStreamReactor* FileStreamReactor::Fail(grpc::Status status) {
  auto* reactor = new FileStreamReactor(nullptr, "", "", 0);
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
      const bool first = fd_ < 0;
      if (first) {
        std::string error;
        long long size = 0;
        files::OpenRefusal why = files::OpenRefusal::kNone;
        fd_ = files::OpenRegularFileUnderRoots({root_}, path_, &error, &size, &why);
        if (fd_ < 0) {
          failure = grpc::Status(why == files::OpenRefusal::kUnavailable
                                     ? grpc::StatusCode::UNAVAILABLE
                                     : grpc::StatusCode::FAILED_PRECONDITION,
                                 path_ + ": " + error);
        } else if (struct stat st; fstat(fd_, &st) != 0 || st.st_nlink != 1) {
          // A file of the job's folder with another name elsewhere (a hard link the job's
          // code made to a file it could not read) is not the job's to hand out.
          failure = grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                                 path_ + ": has other names (a hard link); not sent");
        } else if (size > kMaxFileBytes) {
          failure = grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                                 path_ + ": larger than any model file (1 TiB)");
        } else {
          left_ = static_cast<uint64_t>(size);
          chunk_.set_total_bytes(left_);
          chunk_.set_step(step_);
        }
      }
      if (failure.ok()) {
        std::string* data = chunk_.mutable_data();
        data->resize(std::min<uint64_t>(kChunkBytes, left_));
        ssize_t n;
        do {
          n = read(fd_, data->data(), data->size());
        } while (n < 0 && errno == EINTR);
        if (n < 0) {
          failure = grpc::Status(grpc::StatusCode::UNAVAILABLE,
                                 path_ + ": cannot read: " + std::strerror(errno));
          n = 0;
        }
        data->resize(static_cast<size_t>(n));
        left_ -= static_cast<uint64_t>(n);
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
