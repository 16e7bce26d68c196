// Small file-system helpers over POSIX calls. The worker cannot use std::filesystem: the
// torch wheel's libtorch_cpu.so exports its own, older copy of those functions (142
// std::filesystem symbols), calls from our code can bind to it, and its layouts differ
// from the compiler's — it crashed on the GPU machines. Torch-free and dependency-free.
#pragma once

#include <string>
#include <vector>

namespace stoke::files {

bool Exists(const std::string& path);
bool IsDirectory(const std::string& path);
// Creates the directory and its missing parents; false (with *error set) on failure.
bool MakeDirectories(const std::string& path, std::string* error);
// Names of the entries of a directory (not "." or ".."), or empty if it cannot be read.
std::vector<std::string> ListDirectory(const std::string& path);
// Removes a file or a whole tree; true if nothing is left there.
bool RemoveTree(const std::string& path);
// rename(2): atomic within one file system.
bool Rename(const std::string& from, const std::string& to, std::string* error);

// Opens a file a user named for reading, without ever waiting: open(2) with O_NONBLOCK (a
// FIFO would otherwise block the caller until someone writes to it), then refuses
// anything but a regular file. Returns the descriptor (blocking again, close-on-exec),
// or -1 with *error saying why ("not a regular file (a FIFO)", or errno's text) and
// *not_regular telling the two apart: a path that is there but names no regular file is a
// mistake, one that cannot be opened may yet appear (a filesystem not mounted yet).
int OpenRegularFile(const std::string& path, std::string* error, long long* size = nullptr,
                    bool* not_regular = nullptr);

// A file written through write(2) that remembers its first error instead of reporting it
// to the writer: torch's serializer, told of a failed write, throws again from a
// destructor and ends the process (a full disk crashed the worker). Write() therefore
// always claims success, and Finish() says what went wrong.
class FileSink {
 public:
  explicit FileSink(std::string path);  // created or truncated
  ~FileSink();
  FileSink(const FileSink&) = delete;
  FileSink& operator=(const FileSink&) = delete;

  size_t Write(const void* data, size_t size);
  // Flushes the file to the disk (fsync) and closes it; false, with *error naming the
  // file and the first failure (e.g. "No space left on device"), if anything failed.
  bool Finish(std::string* error);

 private:
  void Fail(const char* what);

  std::string path_;
  int fd_ = -1;
  std::string error_;
};

}  // namespace stoke::files
