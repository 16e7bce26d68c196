// The samples of a file-backed data set that could not be read or decoded (a damaged image,
// a .npy member of the wrong shape): each is skipped and counted, its batch row taken by
// another sample, and the job fails (DATA_LOSS) only once more than max_bad_fraction of
// the set is bad, naming the first bad files. Shared by the loader threads.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "formats/image_files.h"
#include "formats/read_options.h"

namespace stoke::worker {

class BadSamples {
 public:
  // `noun` names the samples in messages ("images", "samples").
  BadSamples(int64_t set_size, double max_bad_fraction, std::string noun);

  // Records sample `index`, read from `file`, as bad for `why` (named with the file unless
  // the message names it already, as a read's error does); throws DATA_LOSS once more
  // distinct samples are bad than the fraction allows (at least one is).
  void Record(int64_t index, const data::ImageFile& file, const data::ReadOptions& options,
              const absl::Status& why);
  int64_t skipped() const { return skipped_.load(); }

  // Loads sample `index` through `load` (false: bad, recorded by it); when it is bad, other
  // samples drawn from `seed` and the index until one loads. Returns the one loaded;
  // throws DATA_LOSS when none of several in a row does, naming `describe(index)`.
  int64_t LoadOrReplace(int64_t index, uint64_t seed, const std::function<bool(int64_t)>& load,
                        const std::function<std::string(int64_t)>& describe) const;

 private:
  int64_t set_size_;
  double max_bad_fraction_;
  std::string noun_;
  std::atomic<int64_t> skipped_{0};
  std::mutex mutex_;
  std::vector<int64_t> bad_;  // distinct, in the order they were met
  std::vector<std::string> reasons_;
};

}  // namespace stoke::worker
