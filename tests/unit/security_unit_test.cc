// Credentials and who may do what, without a network: the tokens file, hashing, secrets
// left readable by everyone, roles and ownership, redaction, and the cleaning of text that
// workers send.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>

#include "security/auth_tokens.h"
#include "security/credential_file.h"
#include "security/token_hash.h"
#include "server/api/access_control.h"
#include "server/api/worker_text.h"
#include "tests/support/temp_dir.h"

namespace stoke {
namespace {

using security::ExposedSecretWarning;
using security::Role;

TEST(TokenHash, IsSha256InHexAndTokensAreFreshEachTime) {
  EXPECT_EQ(security::HashToken("abc"),
            "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  auto a = security::NewToken(), b = security::NewToken();
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->size(), 4u + 64u);
  EXPECT_EQ(a->rfind("stk_", 0), 0u);
  EXPECT_NE(*a, *b);
}

TEST(CredentialFile, ASecretEveryUserCanReadIsWarnedAbout) {
  stoke::testing::TempDir dir;
  const std::string key = dir.File("key.pem");
  std::ofstream(key) << "-----BEGIN PRIVATE KEY-----\n";
  ASSERT_EQ(chmod(key.c_str(), 0644), 0);
  EXPECT_EQ(ExposedSecretWarning(key, "--tls-key"),
            "--tls-key " + key +
                " can be read by every user of this machine (mode 0644): it holds a secret; "
                "chmod o-r it");
  // The owner's, or shared with a group only: as meant.
  for (const mode_t mode : {0600, 0640, 0400}) {
    ASSERT_EQ(chmod(key.c_str(), mode), 0);
    EXPECT_EQ(ExposedSecretWarning(key, "--tls-key"), "") << std::oct << mode;
  }
  EXPECT_EQ(ExposedSecretWarning(dir.File("missing"), "--tls-key"), "") << "reading says why";
}

TEST(TokenFile, ParsesEntriesAndNamesTheLineOfEachMistake) {
  const std::string hash = security::HashToken("t");
  auto entries =
      security::ParseTokenFile("# people\n\nalice submitter " + hash + "\n  host-7 worker " +
                                   security::HashToken("u") + "  \n",
                               "tokens");
  ASSERT_TRUE(entries.ok()) << entries.status();
  ASSERT_EQ(entries->size(), 2u);
  EXPECT_EQ((*entries)[0].name, "alice");
  EXPECT_EQ((*entries)[0].role, Role::kSubmitter);
  EXPECT_EQ((*entries)[1].role, Role::kWorker);
  EXPECT_EQ(security::FormatTokenLine((*entries)[0]), "alice submitter " + hash);

  auto error = [](const std::string& text) {
    return std::string(security::ParseTokenFile(text, "tokens").status().message());
  };
  EXPECT_EQ(error("alice root " + hash),
            "tokens:1: role: root is not viewer, submitter, admin or worker");
  EXPECT_NE(error("\nalice admin stk_the_token_itself").find("tokens:2: hash"), std::string::npos);
  EXPECT_NE(error("a viewer " + hash + "\na admin " + hash).find("tokens:2: name a appears twice"),
            std::string::npos);
  // One token under two names: which name and role it has would depend on the order.
  EXPECT_EQ(error("a viewer " + hash + "\nb admin " + hash),
            "tokens:2: hash: the same as a's; each credential needs a token of its own "
            "(stoke token create)");
  EXPECT_NE(error("al\x1bice viewer " + hash).find("tokens:1: name"), std::string::npos);
  EXPECT_NE(error("alice viewer").find("expected NAME ROLE"), std::string::npos);
}

// A worker token per host: the tokens file says which hosts' workers it may register, and
// a worker id of another host is refused naming the field.
TEST(TokenFile, AFileOthersMayWriteIsRefused) {
  stoke::testing::TempDir dir;
  const std::string path = dir.File("tokens");
  std::ofstream(path) << "root admin " << security::HashToken("stk_root") << "\n";
  ASSERT_EQ(chmod(path.c_str(), 0644), 0);  // hashes only: others may read it
  EXPECT_TRUE(security::ReadTokenFile(path).ok());
  for (const mode_t mode : {0666, 0620}) {
    ASSERT_EQ(chmod(path.c_str(), mode), 0);
    const auto refused = security::ReadTokenFile(path);
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kPermissionDenied) << std::oct << mode;
    EXPECT_NE(refused.status().message().find(path + ": other users may write it"),
              std::string::npos)
        << refused.status();
  }
}

TEST(TokenFile, AnExpiryIsADateOrATimeAndALineSaysItBack) {
  const std::string hash = security::HashToken("stk_x");
  auto parsed = security::ParseTokenFile("a submitter " + hash + " expires=2027-01-31\n" +
                                             "b worker " + security::HashToken("stk_y") +
                                             " expires=2027-01-31T12:30:00Z hosts=gpu-1\n",
                                         "tokens");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ASSERT_EQ(parsed->size(), 2u);
  EXPECT_EQ((*parsed)[0].expires,
            absl::FromCivil(absl::CivilDay(2027, 1, 31), absl::UTCTimeZone()));
  EXPECT_EQ((*parsed)[1].expires,
            absl::FromCivil(absl::CivilMinute(2027, 1, 31, 12, 30), absl::UTCTimeZone()));
  EXPECT_EQ((*parsed)[1].hosts, std::vector<std::string>{"gpu-1"});
  EXPECT_EQ(security::FormatTokenLine((*parsed)[0]),
            "a submitter " + hash + " expires=2027-01-31T00:00:00Z");
  auto again = security::ParseTokenFile(security::FormatTokenLine((*parsed)[1]), "tokens");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ((*again)[0].expires, (*parsed)[1].expires);
  for (const auto& [line, why] : std::vector<std::pair<std::string, std::string>>{
           {"a viewer " + hash + " expires=tomorrow", "tokens:1: expires: tomorrow is no date"},
           {"a viewer " + hash + " expires=2027-01-31 expires=2028-01-01",
            "tokens:1: expected hosts=HOST,... or expires=DATE after the hash, each once"},
           {"a viewer " + hash + " colour=blue",
            "tokens:1: expected hosts=HOST,... or expires="}}) {
    auto bad = security::ParseTokenFile(line, "tokens");
    EXPECT_FALSE(bad.ok()) << line;
    EXPECT_NE(bad.status().message().find(why), std::string::npos) << bad.status();
  }
}

TEST(TokenFile, AWorkerTokenNamesTheHostsItRegisters) {
  const std::string hash = security::HashToken("t");
  auto entries = security::ParseTokenFile("gpu-7 worker " + hash + " hosts=gpu-7,gpu-7b\n", "t");
  ASSERT_TRUE(entries.ok()) << entries.status();
  EXPECT_EQ((*entries)[0].hosts, (std::vector<std::string>{"gpu-7", "gpu-7b"}));
  EXPECT_EQ(security::FormatTokenLine((*entries)[0]),
            "gpu-7 worker " + hash + " hosts=gpu-7,gpu-7b");
  auto error = [](const std::string& text) {
    return std::string(security::ParseTokenFile(text, "tokens").status().message());
  };
  EXPECT_NE(error("alice admin " + hash + " hosts=a").find("worker tokens only"),
            std::string::npos);
  EXPECT_NE(error("w worker " + hash + " hosts=a,b\x1b").find("tokens:1: hosts"),
            std::string::npos);
  EXPECT_NE(error("w worker " + hash + " gpu-7").find("expected hosts="), std::string::npos);

  server::Caller token{"gpu-7", Role::kWorker, "", {"gpu-7"}};
  using server::AccessControl;
  EXPECT_TRUE(AccessControl::RequireHostOf(token, "gpu-7/cuda:3").ok());
  EXPECT_TRUE(AccessControl::RequireHostOf(token, "gpu-7").ok());
  const absl::Status other = AccessControl::RequireHostOf(token, "gpu-8/cuda:0");
  EXPECT_EQ(other.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(other.message(),
            "register.worker_id: gpu-8/cuda:0: token gpu-7 registers workers of gpu-7 only "
            "(HOST or HOST/DEVICE)");
  EXPECT_FALSE(AccessControl::RequireHostOf(token, "gpu-7x/cuda:0").ok());
  server::Caller shared{"workers", Role::kWorker, ""};  // names no host: any
  EXPECT_TRUE(AccessControl::RequireHostOf(shared, "gpu-8/cuda:0").ok());
}

v1::Job JobOf(const std::string& owner) {
  v1::Job job;
  job.set_id("7");
  job.set_owner(owner);
  job.mutable_spec()->mutable_data()->mutable_tokens()->set_train_path("/data/secret.bin");
  job.mutable_spec()->mutable_model()->mutable_torchscript()->set_path("/data/model.pt");
  return job;
}

TEST(AccessControl, RolesAreOrderedAndWorkersAreNoUsers) {
  server::Caller viewer{"v", Role::kViewer, ""}, submitter{"s", Role::kSubmitter, ""},
      admin{"a", Role::kAdmin, ""}, worker{"w", Role::kWorker, ""};
  using server::AccessControl;
  EXPECT_TRUE(AccessControl::Require(viewer, Role::kViewer, "x").ok());
  EXPECT_EQ(AccessControl::Require(viewer, Role::kSubmitter, "submitting").code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(AccessControl::Require(admin, Role::kSubmitter, "x").ok());
  EXPECT_EQ(AccessControl::Require(worker, Role::kViewer, "x").code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(AccessControl::Owns(submitter, JobOf("s")));
  EXPECT_FALSE(AccessControl::Owns(submitter, JobOf("t")));
  EXPECT_FALSE(AccessControl::Owns(viewer, JobOf("v")));  // viewers own nothing
  EXPECT_TRUE(AccessControl::Owns(admin, JobOf("t")));
  EXPECT_EQ(AccessControl::RequireOwner(submitter, JobOf("t"), "cancelling").message(),
            "cancelling of job 7 is for its owner or an admin; s is neither");
}

TEST(AccessControl, NonOwnersSeeNoPaths) {
  v1::Job seen = server::RedactForNonOwner(JobOf("t"));
  EXPECT_TRUE(seen.spec().data().tokens().train_path().empty());
  EXPECT_TRUE(seen.spec().data().has_tokens());  // the kind of data stays visible
  EXPECT_TRUE(seen.spec().model().torchscript().path().empty());
  EXPECT_EQ(seen.owner(), "t");
}

TEST(AccessControl, NonOwnersSeeAFailedJobsMessageWithoutItsPathsOrRequestId) {
  v1::Job job = JobOf("t");
  job.set_request_id("t-retry-7");
  job.set_message(
      "data.images: /srv/data/team-x/secret-faces/train/007.jpg: damaged JPEG; 3 of the "
      "100 images cannot be read (\"/srv/data/b.png\", at /tmp/y) :/rel");
  const v1::Job seen = server::RedactForNonOwner(job);
  EXPECT_EQ(seen.message(),
            "data.images: <path>: damaged JPEG; 3 of the 100 images cannot be read "
            "(\"<path>\", at <path>) :<path>");
  EXPECT_TRUE(seen.request_id().empty());
  EXPECT_EQ(server::RedactPaths("step 10/100, loss 0.5 and/or 1e-3"),
            "step 10/100, loss 0.5 and/or 1e-3")
      << "a slash inside a word is no path";
}

TEST(WorkerText, ControlCharactersAndEscapeSequencesAreDefused) {
  EXPECT_EQ(server::StripControlCharacters("ok\x1b[2Jred\x07\x7f\tz"), "ok?[2Jred??\tz");
  EXPECT_EQ(server::StripControlCharacters("a\nb"), "a?b");
  EXPECT_EQ(server::StripControlCharacters("a\nb", /*keep_newlines=*/true), "a\nb");
  EXPECT_EQ(server::StripControlCharacters("csi\xc2\x9b"
                                           "31m, caf\xc3\xa9"),
            "csi?31m, caf\xc3\xa9");
  v1::WorkerMessage m;
  m.mutable_report()->add_logs()->set_text("loss\x1b]0;pwned\x07 ok\nnext");
  server::SanitizeWorkerMessage(m);
  EXPECT_EQ(m.report().logs(0).text(), "loss?]0;pwned? ok\nnext");
}

}  // namespace
}  // namespace stoke
