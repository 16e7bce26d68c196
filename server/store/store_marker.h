// A note beside an SQLite job store that it has held jobs (DATA_DIR/store.marker: the
// newest job id it held and that job's submission time), so that a store emptied,
// replaced or rolled back behind the coordinator's back (a file truncated to 0 bytes, an
// older copy or another coordinator's store restored) is refused at start instead of
// served, losing every job it lacks without a word.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/store/job_store.h"

namespace stoke::server {

class StoreMarker {
 public:
  // `path`: the marker file; `store_path`: the store it speaks of, for messages.
  StoreMarker(std::string path, std::string store_path);

  // FAILED_PRECONDITION when the marker records jobs and `store` holds none, only older
  // ones, or another job of the recorded id; INTERNAL when the marker cannot be read as
  // one. No marker: OK (a new data directory).
  absl::Status Check(JobStore& store) const;

  // Records the store's newest job id when it is newer than the last one recorded.
  absl::Status Update(JobStore& store);

 private:
  struct Record {
    uint64_t job_id = 0;
    int64_t created_nanos = 0;  // 0: a marker written before it was recorded
  };
  // The newest job `store` holds, none when it holds none.
  static absl::StatusOr<std::optional<v1::Job>> NewestJob(JobStore& store);
  absl::StatusOr<std::optional<Record>> Read() const;

  std::string path_;
  std::string store_path_;
  uint64_t recorded_ = 0;
};

}  // namespace stoke::server
