// Opens a file a job names only if, at the moment it is opened, it lies beneath one of
// the coordinator's data roots. The coordinator checks paths when a job is submitted;
// the worker opens them later, and a symbolic link swapped in between could otherwise
// lead the worker to any file it can read. So the path is resolved here one component
// at a time from directory descriptors (openat with O_NOFOLLOW), links read and followed
// by hand, and the file opened from its parent's descriptor: what is checked is exactly
// what is opened. Links that stay beneath a root are followed, as the coordinator
// allows them. Linux only (O_PATH). Torch-free and dependency-free.
#pragma once

#include <string>
#include <vector>

namespace stoke::files {

enum class OpenRefusal {
  kNone,
  kUnavailable,   // missing or unreadable now; a later attempt may find it
  kNotRegular,    // there, but a folder, FIFO or device: a mistake in the spec
  kOutsideRoots,  // resolves to a place beneath no root, or loops
};

// The descriptor of the regular file `path` names (absolute), opened read-only without
// ever waiting (a FIFO is refused, not opened for reading), close-on-exec; or -1 with
// *error saying why (never anything read from a file) and *why the kind of refusal.
// `roots`: absolute folders; links among their own components are resolved first.
int OpenRegularFileUnderRoots(const std::vector<std::string>& roots, const std::string& path,
                              std::string* error, long long* size, OpenRefusal* why);

}  // namespace stoke::files
