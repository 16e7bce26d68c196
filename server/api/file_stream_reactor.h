// Streams a file to a client in chunks (DownloadModel). Each chunk is read on the
// executor, never in a gRPC callback; the next read starts only when the previous chunk
// has been written, so a slow client holds one chunk in memory, not the file.
#pragma once

#include <grpcpp/grpcpp.h>

#include <cstdio>
#include <mutex>
#include <string>

#include "server/api/executor.h"
#include "stoke/v1/coordinator.pb.h"

namespace stoke::server {

class FileStreamReactor final : public grpc::ServerWriteReactor<v1::FileChunk> {
 public:
  // Owns itself; deleted when gRPC is done with it. `step` is reported in the first chunk.
  static FileStreamReactor* Start(Executor& executor, std::string path, uint64_t step);
  // A reactor that only reports `status`.
  static FileStreamReactor* Fail(grpc::Status status);

  ~FileStreamReactor() override;
  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

 private:
  FileStreamReactor(Executor* executor, std::string path, uint64_t step)
      : executor_(executor), path_(std::move(path)), step_(step) {}
  void ReadNext();  // on the executor
  void FinishOnce(grpc::Status status);

  Executor* executor_;
  const std::string path_;
  const uint64_t step_;
  std::FILE* file_ = nullptr;
  v1::FileChunk chunk_;

  std::mutex mu_;
  bool reading_ = false;  // a ReadNext is queued or running
  bool finished_ = false;
  bool done_ = false;
};

}  // namespace stoke::server
