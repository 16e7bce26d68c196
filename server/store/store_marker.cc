#include "server/store/store_marker.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace stoke::server {
namespace {

constexpr const char* kKey = "newest_job_id=";
constexpr const char* kCreatedKey = " created=";

// A job's create time as a number that survives the store's round trip exactly.
int64_t CreatedNanos(const v1::Job& job) {
  return job.create_time().seconds() * 1'000'000'000 + job.create_time().nanos();
}

}  // namespace

StoreMarker::StoreMarker(std::string path, std::string store_path)
    : path_(std::move(path)), store_path_(std::move(store_path)) {}

absl::StatusOr<std::optional<v1::Job>> StoreMarker::NewestJob(JobStore& store) {
  JobQuery newest;
  newest.limit = 1;
  auto page = store.ListJobs(newest);
  if (!page.ok()) return page.status();
  if (page->jobs.empty()) return std::optional<v1::Job>();
  return std::optional<v1::Job>(std::move(page->jobs.front()));
}

absl::StatusOr<std::optional<StoreMarker::Record>> StoreMarker::Read() const {
  std::ifstream in(path_);
  if (!in) return std::optional<Record>();
  std::string line;
  std::getline(in, line);
  Record record;
  const size_t created = line.find(kCreatedKey);
  const std::string id_text = line.substr(std::strlen(kKey), created - std::strlen(kKey));
  const bool parsed =
      line.rfind(kKey, 0) == 0 && absl::SimpleAtoi(id_text, &record.job_id) &&
      (created == std::string::npos ||
       absl::SimpleAtoi(line.substr(created + std::strlen(kCreatedKey)), &record.created_nanos));
  if (!parsed) {
    return absl::InternalError(
        absl::StrCat(path_, ": not a store marker (\"", kKey,
                     "N created=T\" expected); remove it to write a new one"));
  }
  return std::optional<Record>(record);
}

absl::Status StoreMarker::Check(JobStore& store) const {
  auto recorded = Read();
  if (!recorded.ok()) return recorded.status();
  if (!recorded->has_value() || (*recorded)->job_id == 0) return absl::OkStatus();
  const Record& marker = **recorded;
  auto newest = NewestJob(store);
  if (!newest.ok()) return newest.status();
  uint64_t newest_id = 0;
  if (newest->has_value() && !absl::SimpleAtoi((*newest)->id(), &newest_id)) newest_id = 0;
  std::string what;
  if (newest_id == 0) {
    what = absl::StrCat(store_path_, " holds no jobs, but ", path_,
                        " records that it held jobs up to id ", marker.job_id,
                        ": the store was emptied or replaced.");
  } else if (newest_id < marker.job_id) {
    what = absl::StrCat(store_path_, " holds jobs up to id ", newest_id, ", but ", path_,
                        " records that it held jobs up to id ", marker.job_id,
                        ": this is an older copy of the store, or another one.");
  } else if (marker.created_nanos != 0) {
    auto job = store.GetJob(absl::StrCat(marker.job_id));
    if (job.ok() && CreatedNanos(*job) == marker.created_nanos) return absl::OkStatus();
    if (!job.ok() && !absl::IsNotFound(job.status())) return job.status();
    what = absl::StrCat(store_path_, "'s job ", marker.job_id, " is not the one ", path_,
                        " records (submitted at another time): this is another store.");
  } else {
    return absl::OkStatus();
  }
  return absl::FailedPreconditionError(
      absl::StrCat(what,
                   " Put back the store's newest copy (stoke-coordinator --backup makes them), or "
                   "remove ",
                   path_, " to go on with this one"));
}

absl::Status StoreMarker::Update(JobStore& store) {
  auto newest = NewestJob(store);
  if (!newest.ok()) return newest.status();
  uint64_t id = 0;
  if (newest->has_value() && !absl::SimpleAtoi((*newest)->id(), &id)) id = 0;
  if (id <= recorded_) return absl::OkStatus();
  // Written whole or not at all (a marker cut short would refuse a good store), into a
  // file of a new name that nothing planted beforehand can redirect.
  std::string tmp = path_ + ".XXXXXX";
  const int fd = mkstemp(tmp.data());
  if (fd < 0) {
    return absl::UnavailableError(absl::StrCat(path_, ": cannot write: ", std::strerror(errno)));
  }
  const std::string text = absl::StrCat(kKey, id, kCreatedKey, CreatedNanos(**newest), "\n");
  const bool written = write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  const int saved_errno = errno;
  close(fd);
  if (!written || std::rename(tmp.c_str(), path_.c_str()) != 0) {
    const int error = written ? errno : saved_errno;
    unlink(tmp.c_str());
    return absl::UnavailableError(absl::StrCat(path_, ": cannot write: ", std::strerror(error)));
  }
  recorded_ = id;
  return absl::OkStatus();
}

}  // namespace stoke::server
