// Streams a file to a client in chunks (DownloadModel). Each chunk is read on the
// executor, never in a gRPC callback; the next read starts only when the previous chunk
// has been written, so a slow client holds one chunk in memory, not the file. The file is
// opened beneath its job's folder and nowhere else (whoever can write the folder, a
// remote worker host among them, could plant a link there), never waited on (a FIFO is
// refused), only if it is a regular file, and read no further than its size when opened.
#pragma once

#include <grpcpp/grpcpp.h>

#include <mutex>
#include <string>

#include "server/api/executor.h"
#include "stoke/v1/coordinator.pb.h"

namespace stoke::server {

class FileStreamReactor final : public grpc::ServerWriteReactor<v1::FileChunk> {
 public:
  // Owns itself; deleted when gRPC is done with it. `path` must lie beneath `root` (the
  // job's folder) when opened. `step` is reported in the first chunk.
  static FileStreamReactor* Start(Executor& executor, std::string root, std::string path,
                                  uint64_t step);
  // A reactor that only reports `status`.
  static FileStreamReactor* Fail(grpc::Status status);

  ~FileStreamReactor() override;
  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

 private:
  FileStreamReactor(Executor* executor, std::string root, std::string path, uint64_t step)
      : executor_(executor), root_(std::move(root)), path_(std::move(path)), step_(step) {}
  void ReadNext();  // on the executor
  void FinishOnce(grpc::Status status);

  Executor* executor_;
  const std::string root_;
  const std::string path_;
  const uint64_t step_;
  int fd_ = -1;
  uint64_t left_ = 0;  // bytes of the file still to send
  v1::FileChunk chunk_;

  std::mutex mu_;
  bool reading_ = false;  // a ReadNext is queued or running
  bool finished_ = false;
  bool done_ = false;
};

}  // namespace stoke::server
