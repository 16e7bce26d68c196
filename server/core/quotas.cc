#include "server/core/quotas.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace stoke::server {
namespace {

absl::Status Invalid(const std::string& path, const YAML::Node& node, const std::string& what) {
  const YAML::Mark mark = node.Mark();
  return absl::InvalidArgumentError(absl::StrCat(
      path, mark.is_null() ? std::string() : absl::StrCat(":", mark.line + 1), ": ", what));
}

absl::StatusOr<uint32_t> DeviceCount(const YAML::Node& node, const std::string& path,
                                     const std::string& field) {
  int64_t n = -1;
  if (!node.IsScalar() || !YAML::convert<int64_t>::decode(node, n) || n < 0 || n > 1'000'000) {
    return Invalid(path, node,
                   absl::StrCat(field, ": expected a whole number of devices, 0 or more"));
  }
  return static_cast<uint32_t>(n);
}

absl::StatusOr<QuotaGroup> ParseGroup(const std::string& name, const YAML::Node& node,
                                      const std::string& path) {
  const std::string field = absl::StrCat("groups.", name);
  if (!node.IsMap()) return Invalid(path, node, absl::StrCat(field, ": expected a map"));
  QuotaGroup group{name, {}, {}};
  for (const auto& entry : node) {
    const std::string key = entry.first.as<std::string>();
    const YAML::Node& value = entry.second;
    if (key == "owners") {
      if (!value.IsSequence() || value.size() == 0) {
        return Invalid(path, value, absl::StrCat(field, ".owners: expected a list of token names"));
      }
      for (const auto& owner : value) {
        if (!owner.IsScalar() || owner.Scalar().empty()) {
          return Invalid(path, owner, absl::StrCat(field, ".owners: expected token names"));
        }
        group.owners.push_back(owner.Scalar());
      }
    } else if (key == "gpus" || key == "cpus") {
      auto n = DeviceCount(value, path, absl::StrCat(field, ".", key));
      if (!n.ok()) return n.status();
      group.guaranteed[key == "gpus" ? v1::DEVICE_TYPE_CUDA : v1::DEVICE_TYPE_CPU] = *n;
    } else {
      return Invalid(path, entry.first,
                     absl::StrCat(field, ".", key, ": unknown; a group has owners, gpus and cpus"));
    }
  }
  if (group.owners.empty()) group.owners.push_back(name);
  return group;
}

}  // namespace

absl::StatusOr<Quotas> Quotas::Read(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::InvalidArgumentError(absl::StrCat(path, ": cannot be read"));
  std::stringstream text;
  text << in.rdbuf();
  return Parse(text.str(), path);
}

absl::StatusOr<Quotas> Quotas::Parse(const std::string& text, const std::string& path) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ":", e.mark.line + 1, ": not YAML: ", e.msg));
  }
  Quotas quotas;
  if (root.IsNull()) return quotas;
  if (!root.IsMap()) return Invalid(path, root, "expected a map with groups");
  for (const auto& entry : root) {
    if (entry.first.as<std::string>() != "groups") {
      return Invalid(path, entry.first,
                     absl::StrCat(entry.first.as<std::string>(), ": unknown; the file has groups"));
    }
  }
  const YAML::Node groups = root["groups"];
  if (!groups.IsMap()) return Invalid(path, groups, "groups: expected a map of group names");
  for (const auto& entry : groups) {
    const std::string name = entry.first.as<std::string>();
    auto group = ParseGroup(name, entry.second, path);
    if (!group.ok()) return group.status();
    for (const std::string& owner : group->owners) {
      auto [it, added] = quotas.group_of_owner_.emplace(owner, quotas.groups_.size());
      if (!added) {
        return Invalid(path, entry.second,
                       absl::StrCat("groups.", name, ".owners: ", owner, " is already in group ",
                                    quotas.groups_[it->second].name));
      }
    }
    quotas.groups_.push_back(*std::move(group));
  }
  return quotas;
}

const QuotaGroup* Quotas::GroupOf(const std::string& owner) const {
  auto it = group_of_owner_.find(owner);
  return it == group_of_owner_.end() ? nullptr : &groups_[it->second];
}

std::map<std::string, DeviceCapacity> Quotas::Use(const std::vector<HeldDevices>& running) const {
  std::map<std::string, DeviceCapacity> use;
  for (const HeldDevices& job : running) {
    if (const QuotaGroup* group = GroupOf(job.owner)) use[group->name][job.type] += job.devices;
  }
  return use;
}

bool Quotas::WithinGuarantee(const std::map<std::string, DeviceCapacity>& use,
                             const std::string& owner, v1::DeviceType type,
                             uint32_t devices) const {
  const QuotaGroup* group = GroupOf(owner);
  if (group == nullptr) return false;
  auto held = use.find(group->name);
  const uint32_t now = held == use.end() ? 0 : CountOf(held->second, type);
  return now + devices <= CountOf(group->guaranteed, type);
}

std::set<std::string> Quotas::Borrowing(std::vector<HeldDevices> running) const {
  std::set<std::string> borrowing;
  if (empty()) return borrowing;
  // Oldest first: a group's first jobs fill its guarantee, later ones borrow.
  std::stable_sort(running.begin(), running.end(),
                   [](const HeldDevices& a, const HeldDevices& b) { return a.since < b.since; });
  std::map<std::string, DeviceCapacity> filled;
  for (const HeldDevices& job : running) {
    const QuotaGroup* group = GroupOf(job.owner);
    if (group == nullptr) {
      borrowing.insert(job.job_id);
      continue;
    }
    uint32_t& held = filled[group->name][job.type];
    held += job.devices;
    if (held > CountOf(group->guaranteed, job.type)) borrowing.insert(job.job_id);
  }
  return borrowing;
}

}  // namespace stoke::server
