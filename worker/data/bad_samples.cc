#include "worker/data/bad_samples.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "worker/common/status_error.h"
#include "worker/data/image_transform.h"

namespace stoke::worker {
namespace {

// Samples a bad sample's row tries instead before giving up on the batch.
constexpr int kReplacementTries = 16;
// Bad files named in the error that fails the job.
constexpr size_t kNamedBadFiles = 3;

}  // namespace

BadSamples::BadSamples(int64_t set_size, double max_bad_fraction, std::string noun)
    : set_size_(set_size), max_bad_fraction_(max_bad_fraction), noun_(std::move(noun)) {}

void BadSamples::Record(int64_t index, const data::ImageFile& file,
                        const data::ReadOptions& options, const absl::Status& why) {
  const std::string reason =
      absl::StartsWith(why.message(), file.path)
          ? absl::StrCat(why.message())
          : absl::StrCat(data::DescribeImageFile(file, options), ": ", why.message());
  skipped_.fetch_add(1);
  std::lock_guard<std::mutex> lock(mutex_);
  if (std::find(bad_.begin(), bad_.end(), index) == bad_.end()) {
    bad_.push_back(index);
    reasons_.push_back(reason);
  }
  // At least one bad file is forgiven in any set; more than the share is not.
  const double allowed =
      std::max(1.0, std::floor(max_bad_fraction_ * static_cast<double>(set_size_)));
  if (static_cast<double>(bad_.size()) > allowed) {
    std::string named;
    for (size_t i = 0; i < std::min(kNamedBadFiles, reasons_.size()); ++i) {
      absl::StrAppend(&named, i ? "; " : "", reasons_[i]);
    }
    ThrowIfError(absl::DataLossError(
        absl::StrCat(bad_.size(), " of the ", set_size_, " ", noun_,
                     " cannot be read, more than data.max_bad_fraction allows (", max_bad_fraction_,
                     "): ", named)));
  }
}

int64_t BadSamples::LoadOrReplace(int64_t index, uint64_t seed,
                                  const std::function<bool(int64_t)>& load,
                                  const std::function<std::string(int64_t)>& describe) const {
  int64_t chosen = index;
  for (int attempt = 0; !load(chosen); ++attempt) {
    if (attempt == kReplacementTries) {
      ThrowIfError(absl::DataLossError(
          absl::StrCat(kReplacementTries + 1, " ", noun_,
                       " in a row could not be read; the first: ", describe(index))));
    }
    chosen = static_cast<int64_t>(
        MixSeed(seed, static_cast<uint64_t>(index), static_cast<uint64_t>(attempt)) %
        static_cast<uint64_t>(set_size_));
  }
  return chosen;
}

}  // namespace stoke::worker
