// A note beside an SQLite job store that it has held jobs (DATA_DIR/store.marker: the
// newest job id it held), so that a store emptied or replaced behind the coordinator's
// back (a file truncated to 0 bytes, the wrong file restored) is refused at start instead
// of served as an empty one, losing every queued job without a word.
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

  // FAILED_PRECONDITION when the marker records jobs and `store` holds none; INTERNAL
  // when the marker cannot be read as one. No marker: OK (a new data directory).
  absl::Status Check(JobStore& store) const;

  // Records the store's newest job id when it is newer than the last one recorded.
  absl::Status Update(JobStore& store);

 private:
  // The newest job id `store` holds, 0 when none.
  static absl::StatusOr<uint64_t> NewestJobId(JobStore& store);
  absl::StatusOr<std::optional<uint64_t>> Read() const;

  std::string path_;
  std::string store_path_;
  uint64_t recorded_ = 0;
};

}  // namespace stoke::server
