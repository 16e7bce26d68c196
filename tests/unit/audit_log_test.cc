// The audit log against a real SQLite store and a fake clock: refusals from one peer host
// are written one by one up to a limit a minute, then counted into one entry, so that a
// client needing no credential cannot fill the disk with them; accepted calls and other
// hosts are never held back.
#include "server/api/audit_log.h"

#include <gtest/gtest.h>

#include <string>

#include "server/store/sqlite_job_store.h"
#include "tests/support/temp_dir.h"

namespace stoke::server {
namespace {

class AuditLogTest : public ::testing::Test {
 protected:
  std::vector<v1::AuditEntry> Entries() {
    auto page = store_->ListAudit(0, 10000);
    EXPECT_TRUE(page.ok()) << page.status();
    return page.ok() ? page->entries : std::vector<v1::AuditEntry>{};
  }

  stoke::testing::TempDir dir_;
  std::unique_ptr<SqliteJobStore> store_ = *SqliteJobStore::Open({dir_.File("stoke.db")});
  FakeClock clock_;
};

const Caller kStranger{"?", security::Role::kWorker, "ipv4:10.0.0.7:51234"};
const absl::Status kNoToken = absl::UnauthenticatedError("no token");

TEST_F(AuditLogTest, ThousandsOfRefusalsFromOneHostBecomeTenEntriesAndACount) {
  AuditLog audit(*store_, clock_);
  int written = 0;
  for (int i = 0; i < 2000; ++i) {
    Caller from = kStranger;
    from.peer = "ipv4:10.0.0.7:" + std::to_string(40000 + i);  // a new port each time
    written += audit.Record(from, "Attach", "", kNoToken) ? 1 : 0;
  }
  EXPECT_EQ(written, AuditLog::kRefusalsPerMinute);
  // Another host's refusals and accepted calls are written as they come.
  EXPECT_TRUE(
      audit.Record({"?", security::Role::kWorker, "ipv4:10.0.0.8:1"}, "Attach", "", kNoToken));
  EXPECT_TRUE(audit.Record({"host-a", security::Role::kWorker, "ipv4:10.0.0.7:2"}, "Attach",
                           "host-a/cuda:0", absl::OkStatus()));
  EXPECT_EQ(Entries().size(), AuditLog::kRefusalsPerMinute + 2u);
  // Once the minute is over, the next call writes the count.
  clock_.Advance(absl::Seconds(61));
  EXPECT_TRUE(audit.Record(kStranger, "Attach", "", kNoToken));
  const std::vector<v1::AuditEntry> entries = Entries();
  ASSERT_EQ(entries.size(), AuditLog::kRefusalsPerMinute + 4u);
  bool counted = false;
  for (const auto& e : entries) {
    if (e.result().find("1990 more refused Attach calls from 10.0.0.7") != std::string::npos) {
      counted = true;
      EXPECT_NE(e.result().find("UNAUTHENTICATED: no token"), std::string::npos) << e.result();
    }
  }
  EXPECT_TRUE(counted);
}

TEST_F(AuditLogTest, ACountStillOpenIsWrittenWhenTheLogCloses) {
  {
    AuditLog audit(*store_, clock_);
    for (int i = 0; i < AuditLog::kRefusalsPerMinute + 5; ++i) {
      audit.Record(kStranger, "Attach", "", kNoToken);
    }
  }
  const std::vector<v1::AuditEntry> entries = Entries();
  ASSERT_EQ(entries.size(), AuditLog::kRefusalsPerMinute + 1u);
  EXPECT_NE(entries.front().result().find("5 more refused Attach calls"), std::string::npos)
      << entries.front().result();
}

TEST_F(AuditLogTest, TheStoreKeepsTheNewestEntriesItIsAllowed) {
  AuditLog audit(*store_, clock_, /*max_entries=*/1500);
  for (uint64_t i = 0; i < 3 * AuditLog::kPruneEvery; ++i) {
    audit.Record({"alice", security::Role::kSubmitter, "ipv4:10.0.0.1:1"}, "SubmitJob",
                 std::to_string(i), absl::OkStatus());
  }
  const std::vector<v1::AuditEntry> entries = Entries();
  ASSERT_EQ(entries.size(), 1500u);
  EXPECT_EQ(entries.front().target(), std::to_string(3 * AuditLog::kPruneEvery - 1));
}

}  // namespace
}  // namespace stoke::server
