// Fair share (as Slurm's fair-share factor): each owner's recent use of devices, in
// device-seconds that decay with a half-life, so that among jobs of equal priority the
// owners who have used less lately go first. Pure arithmetic on times it is given.
#pragma once

#include <map>
#include <string>

#include "absl/time/time.h"

namespace stoke::server {

class FairShare {
 public:
  explicit FairShare(absl::Duration half_life) : half_life_(half_life) {}

  // `owner` used `device_seconds` ending at `at`.
  void Accrue(const std::string& owner, double device_seconds, absl::Time at);
  // `owner`'s use as of `now`: each device-second counts half as much per half-life since.
  double Use(const std::string& owner, absl::Time now) const;
  // Every owner's use as of `now`.
  std::map<std::string, double> UseByOwner(absl::Time now) const;

 private:
  struct Account {
    double device_seconds = 0;
    absl::Time as_of = absl::InfinitePast();
  };
  double Decayed(const Account& account, absl::Time now) const;

  absl::Duration half_life_;
  std::map<std::string, Account> accounts_;
};

}  // namespace stoke::server
