// Quotas with borrowing (stoke-coordinator --quotas FILE): each group of owners is
// guaranteed a number of devices of each type. Devices a group leaves idle may be used
// by anyone (borrowed); when the group needs them back, its jobs reclaim them by
// preempting the borrowers (preemption.h). Pure: the file's rules and the arithmetic of
// use against guarantees, no I/O beyond reading the file.
//
// The file:
//   groups:
//     vision:
//       owners: [alice, bob]   # token names; default: the group's own name
//       gpus: 4                # guaranteed CUDA devices
//       cpus: 0                # guaranteed CPU workers
//     carol: {gpus: 2}
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/core/scheduler.h"
#include "stoke/v1/job.pb.h"

namespace stoke::server {

struct QuotaGroup {
  std::string name;
  std::vector<std::string> owners;
  DeviceCapacity guaranteed;
};

// A running job as quotas see it.
struct HeldDevices {
  std::string job_id;
  std::string owner;
  v1::DeviceType type = v1::DEVICE_TYPE_CPU;
  uint32_t devices = 1;
  absl::Time since;  // when its attempt was scheduled
};

class Quotas {
 public:
  // No groups: nothing is guaranteed, nothing borrowed.
  Quotas() = default;
  // Reads `path`; INVALID_ARGUMENT naming the file, the line and the field for anything
  // it cannot use (an unknown key, a negative count, an owner in two groups).
  static absl::StatusOr<Quotas> Read(const std::string& path);
  static absl::StatusOr<Quotas> Parse(const std::string& text, const std::string& path);

  bool empty() const { return groups_.empty(); }
  const std::vector<QuotaGroup>& groups() const { return groups_; }
  // The group of `owner`, or null.
  const QuotaGroup* GroupOf(const std::string& owner) const;

  // Devices each group holds now, by type, from the running jobs.
  std::map<std::string, DeviceCapacity> Use(const std::vector<HeldDevices>& running) const;
  // Whether a job of `owner` needing `devices` of `type` would keep its group within its
  // guarantee: such a job may reclaim borrowed devices.
  bool WithinGuarantee(const std::map<std::string, DeviceCapacity>& use, const std::string& owner,
                       v1::DeviceType type, uint32_t devices) const;
  // The running jobs that hold devices beyond their group's guarantee (the group's newest
  // ones past it), and every job of an owner in no group: those that may be preempted
  // to give borrowed devices back. Empty when there are no groups.
  std::set<std::string> Borrowing(std::vector<HeldDevices> running) const;

 private:
  std::vector<QuotaGroup> groups_;
  std::map<std::string, size_t> group_of_owner_;
};

}  // namespace stoke::server
