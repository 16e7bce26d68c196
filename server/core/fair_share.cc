#include "server/core/fair_share.h"

#include <cmath>

namespace stoke::server {

double FairShare::Decayed(const Account& account, absl::Time now) const {
  if (account.device_seconds == 0 || now <= account.as_of) return account.device_seconds;
  return account.device_seconds * std::exp2(-absl::FDivDuration(now - account.as_of, half_life_));
}

void FairShare::Accrue(const std::string& owner, double device_seconds, absl::Time at) {
  Account& account = accounts_[owner];
  // Use reported late (at < as_of) is decayed to the account's time instead.
  if (at < account.as_of) {
    account.device_seconds +=
        device_seconds * std::exp2(-absl::FDivDuration(account.as_of - at, half_life_));
    return;
  }
  account.device_seconds = Decayed(account, at) + device_seconds;
  account.as_of = at;
}

double FairShare::Use(const std::string& owner, absl::Time now) const {
  auto it = accounts_.find(owner);
  return it == accounts_.end() ? 0 : Decayed(it->second, now);
}

std::map<std::string, double> FairShare::UseByOwner(absl::Time now) const {
  std::map<std::string, double> use;
  for (const auto& [owner, account] : accounts_) use[owner] = Decayed(account, now);
  return use;
}

}  // namespace stoke::server
