#include "server/store/store_marker.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace stoke::server {
namespace {

constexpr const char* kKey = "newest_job_id=";

}  // namespace

StoreMarker::StoreMarker(std::string path, std::string store_path)
    : path_(std::move(path)), store_path_(std::move(store_path)) {}

absl::StatusOr<uint64_t> StoreMarker::NewestJobId(JobStore& store) {
  JobQuery newest;
  newest.limit = 1;
  auto page = store.ListJobs(newest);
  if (!page.ok()) return page.status();
  uint64_t id = 0;
  if (!page->jobs.empty() && !absl::SimpleAtoi(page->jobs.front().id(), &id)) id = 0;
  return id;
}

absl::StatusOr<std::optional<uint64_t>> StoreMarker::Read() const {
  std::ifstream in(path_);
  if (!in) return std::optional<uint64_t>();
  std::string line;
  std::getline(in, line);
  uint64_t id = 0;
  if (line.rfind(kKey, 0) != 0 || !absl::SimpleAtoi(line.substr(std::strlen(kKey)), &id)) {
    return absl::InternalError(absl::StrCat(path_, ": not a store marker (\"", kKey,
                                            "N\" expected); remove it to write a new one"));
  }
  return std::optional<uint64_t>(id);
}

absl::Status StoreMarker::Check(JobStore& store) const {
  auto recorded = Read();
  if (!recorded.ok()) return recorded.status();
  if (!recorded->has_value() || **recorded == 0) return absl::OkStatus();
  auto newest = NewestJobId(store);
  if (!newest.ok()) return newest.status();
  if (*newest > 0) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat(store_path_, " holds no jobs, but ", path_,
                   " records that it held jobs up to id ", **recorded,
                   ": the store was emptied or replaced. Put back a copy of it (stoke-coordinator "
                   "--backup makes them), or remove ",
                   path_, " to start with an empty store"));
}

absl::Status StoreMarker::Update(JobStore& store) {
  auto newest = NewestJobId(store);
  if (!newest.ok()) return newest.status();
  if (*newest <= recorded_) return absl::OkStatus();
  // Written whole or not at all: a marker cut short would refuse a good store.
  const std::string tmp = path_ + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << kKey << *newest << "\n";
    out.close();
    if (!out) {
      std::remove(tmp.c_str());
      return absl::UnavailableError(absl::StrCat(tmp, ": cannot write: ", std::strerror(errno)));
    }
  }
  if (std::rename(tmp.c_str(), path_.c_str()) != 0) {
    std::remove(tmp.c_str());
    return absl::UnavailableError(absl::StrCat(path_, ": cannot write: ", std::strerror(errno)));
  }
  recorded_ = *newest;
  return absl::OkStatus();
}

}  // namespace stoke::server
