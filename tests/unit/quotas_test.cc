// Quotas (a file of groups and their guaranteed devices) and fair share (owners' recent
// use, decaying with a half-life): the file's errors name the file, line and field; use
// against guarantees says who borrows; use halves every half-life.
#include "server/core/quotas.h"

#include <gtest/gtest.h>

#include "server/core/fair_share.h"

namespace stoke::server {
namespace {

const absl::Time kNow = absl::FromUnixSeconds(2'000'000);

TEST(Quotas, AFileOfGroupsGivesEachOwnerItsGroupAndGuarantee) {
  auto quotas = Quotas::Parse(R"(groups:
  vision:
    owners: [alice, bob]
    gpus: 4
  carol: {gpus: 2, cpus: 1}
)",
                              "quotas.yaml");
  ASSERT_TRUE(quotas.ok()) << quotas.status();
  ASSERT_EQ(quotas->groups().size(), 2u);
  EXPECT_EQ(quotas->GroupOf("bob")->name, "vision");
  EXPECT_EQ(quotas->GroupOf("carol")->name, "carol") << "a group's owner defaults to its name";
  EXPECT_EQ(quotas->GroupOf("dave"), nullptr);
  EXPECT_EQ(quotas->GroupOf("alice")->guaranteed.at(v1::DEVICE_TYPE_CUDA), 4u);
  EXPECT_EQ(quotas->GroupOf("carol")->guaranteed.at(v1::DEVICE_TYPE_CPU), 1u);
}

TEST(Quotas, AFileItCannotUseIsRefusedNamingTheFileLineAndField) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"groups:\n  vision:\n    gpus: -1\n",
       "q.yaml:3: groups.vision.gpus: expected a whole number"},
      {"groups:\n  vision:\n    gpu: 2\n", "q.yaml:3: groups.vision.gpu: unknown"},
      {"groups:\n  a: {owners: [x]}\n  b: {owners: [y, x]}\n",
       "groups.b.owners: x is already in group a"},
      {"group:\n  a: {gpus: 1}\n", "q.yaml:1: group: unknown"},
      {"groups: [1, 2\n", "q.yaml:2: not YAML"},
      {"groups:\n  a: {owners: []}\n", "groups.a.owners: expected a list of token names"},
  };
  for (const auto& [text, expected] : cases) {
    auto quotas = Quotas::Parse(text, "q.yaml");
    ASSERT_FALSE(quotas.ok()) << text;
    EXPECT_EQ(quotas.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(std::string(quotas.status().message()).find(expected), std::string::npos)
        << quotas.status().message();
  }
  EXPECT_NE(std::string(Quotas::Read("/nonexistent/q.yaml").status().message())
                .find("/nonexistent/q.yaml: cannot be read"),
            std::string::npos);
}

TEST(Quotas, AGroupsNewestJobsPastItsGuaranteeBorrowAsDoJobsOfOwnersInNoGroup) {
  auto quotas = Quotas::Parse("groups:\n  vision: {owners: [alice, bob], gpus: 2}\n", "q.yaml");
  ASSERT_TRUE(quotas.ok());
  auto held = [](const std::string& id, const std::string& owner, uint32_t devices, int minutes) {
    return HeldDevices{id, owner, v1::DEVICE_TYPE_CUDA, devices, kNow - absl::Minutes(minutes)};
  };
  const std::vector<HeldDevices> running = {held("1", "alice", 1, 30), held("2", "bob", 1, 20),
                                            held("3", "alice", 1, 10), held("4", "dave", 1, 40)};
  EXPECT_EQ(quotas->Borrowing(running), (std::set<std::string>{"3", "4"}));
  const auto use = quotas->Use(running);
  EXPECT_EQ(use.at("vision").at(v1::DEVICE_TYPE_CUDA), 3u);
  EXPECT_FALSE(quotas->WithinGuarantee(use, "alice", v1::DEVICE_TYPE_CUDA, 1));
  EXPECT_TRUE(quotas->WithinGuarantee({}, "alice", v1::DEVICE_TYPE_CUDA, 2));
  EXPECT_FALSE(quotas->WithinGuarantee({}, "alice", v1::DEVICE_TYPE_CUDA, 3));
  EXPECT_FALSE(quotas->WithinGuarantee({}, "dave", v1::DEVICE_TYPE_CUDA, 1));
  EXPECT_TRUE(Quotas().Borrowing(running).empty()) << "without groups nobody borrows";
}

TEST(FairShare, UseHalvesEveryHalfLifeAndAddsUp) {
  FairShare share(absl::Hours(24));
  share.Accrue("alice", 3600, kNow);
  EXPECT_DOUBLE_EQ(share.Use("alice", kNow), 3600);
  EXPECT_DOUBLE_EQ(share.Use("alice", kNow + absl::Hours(24)), 1800);
  EXPECT_DOUBLE_EQ(share.Use("alice", kNow + absl::Hours(48)), 900);
  share.Accrue("alice", 100, kNow + absl::Hours(24));
  EXPECT_DOUBLE_EQ(share.Use("alice", kNow + absl::Hours(24)), 1900);
  // Use reported late counts as decayed to the account's time.
  share.Accrue("alice", 200, kNow);
  EXPECT_DOUBLE_EQ(share.Use("alice", kNow + absl::Hours(24)), 2000);
  EXPECT_EQ(share.Use("bob", kNow), 0);
  EXPECT_EQ(share.UseByOwner(kNow + absl::Hours(24)).at("alice"), 2000);
}

}  // namespace
}  // namespace stoke::server
