#include "spec/code_bundle.h"

#include <dirent.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <memory>
#include <set>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "files/descriptor.h"

namespace stoke::spec {
namespace {

absl::Status Invalid(const std::string& field, const std::string& problem) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", problem));
}

std::string TooLarge(const std::string& what) {
  return absl::StrCat(what, "; the code of a job may take at most ", kMaxCodeBytes >> 20,
                      " MiB in ", kMaxCodeFiles,
                      " files: keep data, weights and checkpoints on a data root and read them "
                      "from there");
}

// Files and folders of a walk, opened relative to their folder's descriptor and never
// through a symbolic link, so what is read is what was listed.
class Reader {
 public:
  Reader(std::string field, v1::CodeBundle& bundle) : field_(std::move(field)), bundle_(bundle) {}

  absl::Status AddFile(int dir_fd, const std::string& name, const std::string& shown,
                       const std::string& bundle_path) {
    files::Descriptor file{
        openat(dir_fd, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)};
    if (file.get() < 0) return Unreadable(shown);
    return AddOpened(file.get(), shown, bundle_path);
  }

  // Reads an open descriptor (non-blocking: a FIFO is refused, not waited on).
  absl::Status AddOpened(int fd, const std::string& shown, const std::string& bundle_path) {
    struct stat st;
    if (fstat(fd, &st) != 0) return Unreadable(shown);
    if (!S_ISREG(st.st_mode)) {
      return Invalid(field_, absl::StrCat(shown, ": not a regular file"));
    }
    if (bundle_.files_size() >= kMaxCodeFiles) {
      return Invalid(field_,
                     TooLarge(absl::StrCat(shown, ": more than ", kMaxCodeFiles, " files")));
    }
    std::string content;
    char buffer[1 << 16];
    for (;;) {
      const ssize_t n = read(fd, buffer, sizeof buffer);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return Unreadable(shown);
      if (n == 0) break;
      content.append(buffer, static_cast<size_t>(n));
      if (total_ + content.size() > kMaxCodeBytes) {
        return Invalid(field_, TooLarge(absl::StrCat(shown, ": more than ", kMaxCodeBytes >> 20,
                                                     " MiB of files")));
      }
    }
    total_ += content.size();
    v1::CodeFile* added = bundle_.add_files();
    added->set_path(bundle_path);
    added->set_content(std::move(content));
    return absl::OkStatus();
  }

  absl::Status AddFolder(int parent_fd, const std::string& name, const std::string& shown,
                         const std::string& bundle_path, int depth) {
    if (depth > 32) return Invalid(field_, absl::StrCat(shown, ": folders nested too deeply"));
    files::Descriptor dir{
        openat(parent_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)};
    if (dir.get() < 0) return Unreadable(shown);
    DIR* stream = fdopendir(dup(dir.get()));
    if (stream == nullptr) return Unreadable(shown);
    std::vector<std::string> names;
    while (const dirent* entry = readdir(stream)) {
      const std::string entry_name = entry->d_name;
      // Hidden entries (.git, .venv), bytecode caches: not code the model needs.
      if (entry_name.empty() || entry_name[0] == '.' || entry_name == "__pycache__" ||
          absl::EndsWith(entry_name, ".pyc")) {
        continue;
      }
      names.push_back(entry_name);
    }
    closedir(stream);
    std::sort(names.begin(), names.end());
    for (const std::string& entry_name : names) {
      const std::string entry_shown = absl::StrCat(shown, "/", entry_name);
      const std::string entry_path = absl::StrCat(bundle_path, "/", entry_name);
      struct stat st;
      if (fstatat(dir.get(), entry_name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
        return Unreadable(entry_shown);
      }
      absl::Status added;
      if (S_ISDIR(st.st_mode)) {
        added = AddFolder(dir.get(), entry_name, entry_shown, entry_path, depth + 1);
      } else if (S_ISREG(st.st_mode)) {
        added = AddFile(dir.get(), entry_name, entry_shown, entry_path);
      } else {
        added = Invalid(field_,
                        absl::StrCat(entry_shown, S_ISLNK(st.st_mode) ? ": a symbolic link" : "",
                                     ": code must be plain files and folders"));
      }
      if (!added.ok()) return added;
    }
    return absl::OkStatus();
  }

 private:
  absl::Status Unreadable(const std::string& shown) const {
    return Invalid(field_, absl::StrCat(shown, ": cannot read: ", std::strerror(errno)));
  }

  const std::string field_;
  v1::CodeBundle& bundle_;
  uint64_t total_ = 0;
};

std::string BaseName(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::string ParentOf(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

bool IsIdentifier(const std::string& text) {
  if (text.empty() || std::isdigit(static_cast<unsigned char>(text[0]))) return false;
  return std::all_of(text.begin(), text.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
  });
}

absl::Status MakeFolders(const std::string& root, const std::string& relative) {
  std::string path = root;
  for (const absl::string_view part : absl::StrSplit(relative, '/')) {
    absl::StrAppend(&path, "/", part);
    if (mkdir(path.c_str(), 0755) != 0 && errno != EEXIST) {
      return absl::InternalError(absl::StrCat("cannot create ", path, ": ", std::strerror(errno)));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<v1::CodeBundle> ReadCodeBundle(const std::string& path, const std::string& field) {
  if (path.empty()) return Invalid(field, "required: a .py file or a folder holding a package");
  const std::string name = BaseName(path);
  if (name.empty() || name == "/" || name == "." || name == "..") {
    return Invalid(field, absl::StrCat(path, ": name the .py file or the package folder itself"));
  }
  files::Descriptor parent{open(ParentOf(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)};
  struct stat st;
  if (parent.get() < 0 || fstatat(parent.get(), name.c_str(), &st, 0) != 0) {
    return Invalid(field, absl::StrCat(path, ": ", std::strerror(errno)));
  }
  v1::CodeBundle bundle;
  Reader reader(field, bundle);
  if (S_ISDIR(st.st_mode)) {
    if (auto s = reader.AddFolder(parent.get(), name, path, name, 0); !s.ok()) return s;
    if (bundle.files_size() == 0) return Invalid(field, absl::StrCat(path, ": an empty folder"));
  } else if (S_ISREG(st.st_mode)) {
    if (!absl::EndsWith(name, ".py")) {
      return Invalid(field, absl::StrCat(path, ": expected a .py file or a package folder"));
    }
    // The file named is read even through a link; a folder's walk follows none.
    files::Descriptor file{open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC)};
    if (file.get() < 0) return Invalid(field, absl::StrCat(path, ": ", std::strerror(errno)));
    if (auto s = reader.AddOpened(file.get(), path, name); !s.ok()) return s;
  } else {
    return Invalid(field, absl::StrCat(path, ": expected a .py file or a package folder"));
  }
  return bundle;
}

absl::Status CheckCodeBundle(const v1::CodeBundle& bundle, const std::string& field) {
  if (bundle.files_size() == 0) {
    return Invalid(field,
                   "no code was sent with the job: `stoke submit` and the Python SDK read it "
                   "from the file or folder this field names");
  }
  if (bundle.files_size() > kMaxCodeFiles) {
    return Invalid(field, TooLarge(absl::StrCat(bundle.files_size(), " files")));
  }
  if (const uint64_t bytes = CodeBytes(bundle); bytes > kMaxCodeBytes) {
    return Invalid(field, TooLarge(absl::StrCat(bytes, " bytes")));
  }
  std::set<std::string> paths;
  std::set<std::string> folders;
  for (const v1::CodeFile& file : bundle.files()) {
    const std::string& path = file.path();
    const std::string shown = absl::StrCat("code file \"", absl::CEscape(path.substr(0, 64)), "\"");
    if (path.empty() || path.size() > kMaxCodePathBytes) {
      return Invalid(field, absl::StrCat(shown, ": a path of 1 to ", kMaxCodePathBytes, " bytes"));
    }
    if (path.find('\0') != std::string::npos || path.find('\\') != std::string::npos) {
      return Invalid(field, absl::StrCat(shown, ": a path may not hold NUL or backslash"));
    }
    std::string prefix;
    for (const absl::string_view part : absl::StrSplit(path, '/')) {
      if (part.empty() || part == "." || part == "..") {
        return Invalid(field, absl::StrCat(shown,
                                           ": a relative path without empty, \".\" or "
                                           "\"..\" parts"));
      }
      if (!prefix.empty()) folders.insert(prefix);
      absl::StrAppend(&prefix, prefix.empty() ? "" : "/", part);
    }
    if (!paths.insert(path).second) return Invalid(field, absl::StrCat(shown, ": given twice"));
  }
  for (const std::string& folder : folders) {
    if (paths.count(folder)) {
      return Invalid(field, absl::StrCat("code file \"", folder, "\": both a file and a folder"));
    }
  }
  return absl::OkStatus();
}

uint64_t CodeBytes(const v1::CodeBundle& bundle) {
  uint64_t bytes = 0;
  for (const v1::CodeFile& file : bundle.files()) bytes += file.content().size();
  return bytes;
}

std::string CodeDigest(const v1::CodeBundle& bundle) {
  std::vector<const v1::CodeFile*> files;
  for (const v1::CodeFile& file : bundle.files()) files.push_back(&file);
  std::sort(files.begin(), files.end(),
            [](const v1::CodeFile* a, const v1::CodeFile* b) { return a->path() < b->path(); });
  std::unique_ptr<EVP_MD_CTX, void (*)(EVP_MD_CTX*)> context(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  EVP_DigestInit_ex(context.get(), EVP_sha256(), nullptr);
  for (const v1::CodeFile* file : files) {
    EVP_DigestUpdate(context.get(), file->path().data(), file->path().size());
    const unsigned char nul = 0;
    EVP_DigestUpdate(context.get(), &nul, 1);
    uint64_t size = file->content().size();
    unsigned char size_bytes[8];
    for (unsigned char& b : size_bytes) {
      b = static_cast<unsigned char>(size & 0xff);
      size >>= 8;
    }
    EVP_DigestUpdate(context.get(), size_bytes, sizeof size_bytes);
    EVP_DigestUpdate(context.get(), file->content().data(), file->content().size());
  }
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int digest_size = 0;
  EVP_DigestFinal_ex(context.get(), digest, &digest_size);
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(digest), digest_size));
}

absl::StatusOr<std::string> EntryModule(const v1::CodeBundle& bundle, const std::string& module,
                                        const std::string& field) {
  std::set<std::string> paths;
  std::set<std::string> top;
  for (const v1::CodeFile& file : bundle.files()) {
    paths.insert(file.path());
    top.insert(std::string(absl::string_view(file.path()).substr(0, file.path().find('/'))));
  }
  if (module.empty()) {
    if (top.size() != 1) {
      return Invalid(field + ".module",
                     "required when the code has several top-level files or folders");
    }
    std::string entry = *top.begin();
    if (paths.count(entry)) {  // a file
      if (!absl::EndsWith(entry, ".py")) {
        return Invalid(field + ".file", absl::StrCat(entry, ": expected a .py file"));
      }
      entry.resize(entry.size() - 3);
    }
    if (!IsIdentifier(entry)) {
      return Invalid(field + ".file",
                     absl::StrCat("\"", entry,
                                  "\" cannot be imported by Python: rename it to letters, digits "
                                  "and underscores, or name model.python.module"));
    }
    return entry;
  }
  for (const absl::string_view part : absl::StrSplit(module, '.')) {
    if (!IsIdentifier(std::string{part})) {
      return Invalid(field + ".module", absl::StrCat("\"", module, "\" is not a module name"));
    }
  }
  const std::string as_path = absl::StrReplaceAll(module, {{".", "/"}});
  if (!paths.count(as_path + ".py") && !paths.count(as_path + "/__init__.py")) {
    return Invalid(field + ".module", absl::StrCat("\"", module, "\": no ", as_path, ".py or ",
                                                   as_path, "/__init__.py in the code"));
  }
  return module;
}

absl::Status RecordCode(const v1::CodeBundle& bundle, v1::PythonModelSpec& python) {
  if (auto s = CheckCodeBundle(bundle, "model.python.file"); !s.ok()) return s;
  auto module = EntryModule(bundle, python.module(), "model.python");
  if (!module.ok()) return module.status();
  python.set_module(*module);
  python.set_code_sha256(CodeDigest(bundle));
  python.set_code_bytes(CodeBytes(bundle));
  return absl::OkStatus();
}

absl::StatusOr<v1::CodeBundle> ReadWorkdir(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    return Invalid("command.workdir", absl::StrCat(path, ": ", std::strerror(errno)));
  }
  if (!S_ISDIR(st.st_mode)) {
    return Invalid("command.workdir", absl::StrCat(path, ": expected a folder"));
  }
  return ReadCodeBundle(path, "command.workdir");
}

std::string WorkdirName(const v1::CodeBundle& bundle) {
  std::string name;
  for (const v1::CodeFile& file : bundle.files()) {
    const size_t slash = file.path().find('/');
    if (slash == std::string::npos) return "";
    const absl::string_view first = absl::string_view(file.path()).substr(0, slash);
    if (name.empty()) name = std::string{first};
    if (first != name) return "";
  }
  return name;
}

absl::Status RecordWorkdir(const v1::CodeBundle& bundle, v1::CommandSpec& command) {
  if (auto s = CheckCodeBundle(bundle, "command.workdir"); !s.ok()) return s;
  if (WorkdirName(bundle).empty()) {
    return Invalid("command.workdir", "the files sent must lie in one folder, the working folder");
  }
  command.set_code_sha256(CodeDigest(bundle));
  command.set_code_bytes(CodeBytes(bundle));
  return absl::OkStatus();
}

std::string CodeDigestOf(const v1::JobSpec& spec) {
  if (spec.model().has_python()) return spec.model().python().code_sha256();
  if (spec.has_command()) return spec.command().code_sha256();
  return "";
}

absl::Status WriteCodeBundle(const v1::CodeBundle& bundle, const std::string& dir) {
  if (auto s = CheckCodeBundle(bundle, "code"); !s.ok()) return s;
  if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
    return absl::InternalError(absl::StrCat("cannot create ", dir, ": ", std::strerror(errno)));
  }
  for (const v1::CodeFile& file : bundle.files()) {
    const size_t slash = file.path().rfind('/');
    if (slash != std::string::npos) {
      if (auto s = MakeFolders(dir, file.path().substr(0, slash)); !s.ok()) return s;
    }
    const std::string path = absl::StrCat(dir, "/", file.path());
    files::Descriptor out{
        open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644)};
    if (out.get() < 0) {
      return absl::InternalError(absl::StrCat("cannot create ", path, ": ", std::strerror(errno)));
    }
    const std::string& content = file.content();
    size_t written = 0;
    while (written < content.size()) {
      const ssize_t n = write(out.get(), content.data() + written, content.size() - written);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        return absl::InternalError(absl::StrCat("cannot write ", path, ": ", std::strerror(errno)));
      }
      written += static_cast<size_t>(n);
    }
  }
  return absl::OkStatus();
}

}  // namespace stoke::spec
