// How a reader opens and reads the files a job names. The coordinator (at submission) and
// the worker pass the data roots, so that every file is checked against them when it is
// opened, not only when its path was resolved (a link swapped in between leads nowhere);
// the worker also passes its cancel flag, so that a long read of a large file stops when
// the job is cancelled. The CLI passes nothing: it reads what its user named.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace stoke::data {

struct ReadOptions {
  // Absolute folders the files must lie beneath when opened; empty: anywhere.
  std::vector<std::string> roots;
  // Read between pieces of a long read; once true, the reader stops with CANCELLED.
  const std::atomic<bool>* cancel = nullptr;

  bool cancelled() const { return cancel != nullptr && cancel->load(std::memory_order_relaxed); }
};

// The descriptor of the regular file `path`, opened without ever waiting (a FIFO is
// refused). Errors name the file and say why, never with anything read from it:
// NOT_FOUND when it may yet appear (a file system not mounted yet), INVALID_ARGUMENT when
// it is no regular file, PERMISSION_DENIED when it leads outside the roots.
absl::StatusOr<int> OpenDataFile(const std::string& path, const ReadOptions& options,
                                 long long* size);

// The regular file `path`, opened as OpenDataFile opens it, read whole into `bytes`;
// INVALID_ARGUMENT, before reading, when it is larger than `max_size`. DATA_LOSS when it
// ends before its size said.
absl::Status ReadDataFile(const std::string& path, const ReadOptions& options, size_t max_size,
                          std::string* bytes);
// The same for its first `limit` bytes only (all of it when smaller): a header.
absl::Status ReadDataFileHead(const std::string& path, const ReadOptions& options, size_t limit,
                              std::string* bytes);

// `length` bytes at `offset` of the file (a member of a tar shard); DATA_LOSS when the
// file ends first.
absl::Status ReadDataFileRange(const std::string& path, const ReadOptions& options, int64_t offset,
                               int64_t length, std::string* bytes);

// Reads `size` bytes at `offset` of the open file `fd`, going on after short reads; the
// bytes read, fewer only where the file ends (or a read fails).
int64_t ReadFully(int fd, int64_t offset, int64_t size, void* out);

// CANCELLED, naming the file, for a reader that stopped because its job was cancelled.
absl::Status ReadCancelled(const std::string& path);

}  // namespace stoke::data
