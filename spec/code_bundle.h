// A Python model's code as it travels with its job (stoke.v1.CodeBundle): read from the
// submitter's file or folder, checked and fingerprinted by the coordinator, written into
// the attempt's folder by the worker. One owner of these rules for the CLI, the
// coordinator, the worker and stoke-bench. Torch-free.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "stoke/v1/job_spec.pb.h"

namespace stoke::spec {

// What code may take: it travels with every job and every assignment, so data, weights
// and checkpoints belong on a data root instead.
inline constexpr uint64_t kMaxCodeBytes = 8ull << 20;
inline constexpr int kMaxCodeFiles = 1000;
inline constexpr size_t kMaxCodePathBytes = 512;

// Reads a .py file, or a folder (a package) with everything beneath it except hidden
// entries, __pycache__ folders and .pyc files, into a bundle whose paths start with the
// file's or folder's own name ("model.py", "mypkg/__init__.py"). INVALID_ARGUMENT naming
// `field` and the file for anything but regular files and folders, and past the limits.
absl::StatusOr<v1::CodeBundle> ReadCodeBundle(const std::string& path, const std::string& field);

// OK when every path is relative, '/'-separated, without empty, "." or ".." parts, unique,
// and the bundle is within the limits; otherwise INVALID_ARGUMENT naming `field`.
absl::Status CheckCodeBundle(const v1::CodeBundle& bundle, const std::string& field);

// The content bytes of every file.
uint64_t CodeBytes(const v1::CodeBundle& bundle);

// SHA-256, lowercase hex, of the files in path order (each: path, a NUL, its size as 8
// little-endian bytes, its content): the same files give the same digest however they
// were listed.
std::string CodeDigest(const v1::CodeBundle& bundle);

// The module to import: `module` when set (it must be in the bundle), else the bundle's
// one top-level entry ("model.py" -> "model", "mypkg/" -> "mypkg"). INVALID_ARGUMENT
// naming `field` when there is none or it is not there.
absl::StatusOr<std::string> EntryModule(const v1::CodeBundle& bundle, const std::string& module,
                                        const std::string& field);

// Checks a Python model's code and records in its spec what will be imported from it
// (the module), the code's digest and its size: a stored spec then names exactly the code
// that runs. INVALID_ARGUMENT naming the model.python field at fault.
absl::Status RecordCode(const v1::CodeBundle& bundle, v1::PythonModelSpec& python);

// A script job's working folder (command.workdir) as ReadCodeBundle reads it, every path
// beginning with the folder's name; INVALID_ARGUMENT naming command.workdir when `path`
// is not a folder.
absl::StatusOr<v1::CodeBundle> ReadWorkdir(const std::string& path);

// The folder a working-folder bundle holds: the first part of its paths, or "" when
// they do not all share one folder.
std::string WorkdirName(const v1::CodeBundle& bundle);

// Checks a script job's working folder and records its digest and size in the spec.
// INVALID_ARGUMENT naming command.workdir.
absl::Status RecordWorkdir(const v1::CodeBundle& bundle, v1::CommandSpec& command);

// The digest of the code that travels with the job (model.python's or command.workdir's),
// "" for a job without any.
std::string CodeDigestOf(const v1::JobSpec& spec);

// Writes the (checked) bundle's files beneath `dir`, which is created and must not exist
// yet or be empty; files are created new, never through a link.
absl::Status WriteCodeBundle(const v1::CodeBundle& bundle, const std::string& dir);

}  // namespace stoke::spec
