// A coordinator deployed as docs/security.md says (TLS, a tokens file,
// workers that join with a token or a client certificate), attacked the ways an open one
// could be: no token, a wrong role, someone else's job, a stolen worker id, a forged
// report, escape codes in worker text, an unauthenticated scrape. Certificates are made
// by the test with the openssl CLI.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>

#include <fstream>
#include <iterator>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "security/token_hash.h"
#include "stoke/v1/worker_link.grpc.pb.h"
#include "tests/support/coordinator_process.h"
#include "tests/support/http_get.h"
#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"
#include "tests/support/wait.h"

namespace stoke::testing {
namespace {

struct Credential {
  std::string name;
  std::string role;
  std::string token;
};

class SecurityTest : public ::testing::Test {
 protected:
  // Made by the first test rather than in SetUpTestSuite, so that a failure fails it
  // (from SetUpTestSuite, gtest would only skip the tests).
  static bool MakeCredentials() {
    // The server's certificate is self-signed (so local workers can verify with it);
    // workers' client certificates come from a CA of their own.
    if (!OpenSsl({"req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj",
                  "/CN=stoke-coordinator", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
                  "-keyout", Path("server.key"), "-out", Path("server.pem")}) ||
        !OpenSsl({"req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj",
                  "/CN=stoke-worker-ca", "-keyout", Path("ca.key"), "-out", Path("ca.pem")}) ||
        !OpenSsl({"req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=gpu-host-7", "-keyout",
                  Path("worker.key"), "-out", Path("worker.csr")}) ||
        !OpenSsl({"x509", "-req", "-in", Path("worker.csr"), "-CA", Path("ca.pem"), "-CAkey",
                  Path("ca.key"), "-CAcreateserial", "-days", "2", "-out", Path("worker.pem")})) {
      return false;
    }
    std::ofstream tokens(Path("tokens"));
    tokens << "# name role hash\n";
    for (const auto& c : Credentials()) {
      tokens << c.name << " " << c.role << " " << security::HashToken(c.token) << "\n";
    }
    std::ofstream(Path("metrics.token")) << "scrape-secret\n";
    return true;
  }
  static void TearDownTestSuite() {
    delete coordinator_;
    coordinator_ = nullptr;
    delete dir_;
    dir_ = nullptr;
  }

  void SetUp() override {
    if (!dir_) {
      dir_ = new TempDir();
      ASSERT_TRUE(MakeCredentials());
    }
    if (!coordinator_) {
      CoordinatorProcess::Options options{Path("data")};
      options.local_workers = "cpu:1";
      options.extra_args = {"--heartbeat-timeout", "6",
                            "--tls-cert",          Path("server.pem"),
                            "--tls-key",           Path("server.key"),
                            "--client-ca",         Path("ca.pem"),
                            "--auth-tokens",       Path("tokens"),
                            "--metrics-token",     Path("metrics.token")};
      options.client_token = Token("root");
      options.client_tls_ca = Path("server.pem");
      coordinator_ = CoordinatorProcess::Start(options).release();
    }
    ASSERT_NE(coordinator_, nullptr);
  }

  static const std::vector<Credential>& Credentials() {
    static const auto* credentials = new std::vector<Credential>{
        {"root", "admin", "stk_root-token"},     {"alice", "submitter", "stk_alice-token"},
        {"bob", "submitter", "stk_bob-token"},   {"victor", "viewer", "stk_victor-token"},
        {"host-a", "worker", "stk_host-a-join"}, {"host-b", "worker", "stk_host-b-join"}};
    return *credentials;
  }
  static std::string Token(const std::string& name) {
    for (const auto& c : Credentials()) {
      if (c.name == name) return c.token;
    }
    return "";
  }
  static std::string Path(const std::string& name) { return dir_->File(name); }
  static bool OpenSsl(std::vector<std::string> args) {
    args.insert(args.begin(), "/usr/bin/openssl");
    CommandResult r = RunCommand(args);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return r.exit_code == 0;
  }

  // A client as `name` (empty: no token), over TLS.
  std::unique_ptr<client::Client> As(const std::string& name) {
    client::ClientOptions options;
    options.address = coordinator_->address();
    options.token = name.empty() ? "" : Token(name);
    options.tls_ca = Path("server.pem");
    return *client::Client::Connect(options);
  }

  std::string Submit(const std::string& name, int steps = 40) {
    v1::JobSpec spec;
    spec.set_name("secret-" + name);
    spec.mutable_model()->mutable_mlp()->add_hidden(16);
    spec.mutable_data()->mutable_mnist()->set_path("/usr/share/datasets/fashion-mnist");
    spec.mutable_training()->set_steps(steps);
    spec.mutable_training()->set_batch_size(16);
    spec.mutable_metrics()->set_interval_steps(10);
    auto job = As(name)->SubmitJob(spec);
    EXPECT_TRUE(job.ok()) << job.status();
    return job.ok() ? job->id() : "";
  }

  CommandResult Stoke(std::vector<std::string> args, const std::string& token) {
    args.insert(args.begin(), {STOKE_CLI_BINARY, "--address", coordinator_->address(), "--tls-ca",
                               Path("server.pem"), "--config", Path("no-config")});
    return RunCommand(args, {"STOKE_TOKEN=" + token});
  }

  // A raw WorkerLink stream, as a process that speaks the protocol would open it.
  struct RawWorker {
    std::unique_ptr<v1::WorkerLink::Stub> stub;
    grpc::ClientContext context;
    std::unique_ptr<grpc::ClientReaderWriter<v1::WorkerMessage, v1::CoordinatorMessage>> stream;
  };
  std::unique_ptr<RawWorker> Attach(const std::string& id, const std::string& token) {
    grpc::SslCredentialsOptions ssl;
    std::ifstream in(Path("server.pem"));
    ssl.pem_root_certs.assign(std::istreambuf_iterator<char>(in), {});
    auto raw = std::make_unique<RawWorker>();
    raw->stub = v1::WorkerLink::NewStub(
        grpc::CreateChannel(coordinator_->address(), grpc::SslCredentials(ssl)));
    if (!token.empty()) raw->context.AddMetadata("authorization", "Bearer " + token);
    raw->stream = raw->stub->Attach(&raw->context);
    v1::WorkerMessage hello;
    hello.mutable_register_()->set_worker_id(id);
    hello.mutable_register_()->set_host("intruder");
    hello.mutable_register_()->mutable_device()->set_type(v1::DEVICE_TYPE_CPU);
    raw->stream->Write(hello);
    return raw;
  }

  static TempDir* dir_;
  static CoordinatorProcess* coordinator_;
};

TempDir* SecurityTest::dir_ = nullptr;
CoordinatorProcess* SecurityTest::coordinator_ = nullptr;

TEST_F(SecurityTest, CallsWithoutAValidTokenAreUnauthenticated) {
  EXPECT_EQ(As("")->GetCluster().status().code(), absl::StatusCode::kUnauthenticated);
  client::ClientOptions wrong{coordinator_->address()};
  wrong.token = "stk_guessed";
  wrong.tls_ca = Path("server.pem");
  EXPECT_EQ((*client::Client::Connect(wrong))->GetCluster().status().code(),
            absl::StatusCode::kUnauthenticated);
  // A worker's join token is not a user's token.
  EXPECT_EQ(As("host-a")->GetCluster().status().code(), absl::StatusCode::kPermissionDenied);
  // Plaintext to a TLS port gets nowhere.
  client::ClientOptions plain{coordinator_->address()};
  plain.token = Token("root");
  plain.call_timeout = std::chrono::milliseconds(3000);
  EXPECT_FALSE((*client::Client::Connect(plain))->GetCluster().ok());
}

TEST_F(SecurityTest, RolesAndOwnershipDecideWhoMayDoWhat) {
  const std::string job = Submit("alice", 1'000'000);  // runs until cancelled
  ASSERT_FALSE(job.empty());
  // A viewer reads states, not where the data lies, and submits nothing.
  auto seen = As("victor")->GetJob(job);
  ASSERT_TRUE(seen.ok()) << seen.status();
  EXPECT_EQ(seen->owner(), "alice");
  EXPECT_TRUE(seen->spec().data().mnist().path().empty());
  EXPECT_EQ(As("alice")->GetJob(job)->spec().data().mnist().path(),
            "/usr/share/datasets/fashion-mnist");
  v1::JobSpec spec = As("alice")->GetJob(job)->spec();
  EXPECT_EQ(As("victor")->SubmitJob(spec).status().code(), absl::StatusCode::kPermissionDenied);
  // Another submitter may not touch alice's job, its checkpoints or its model.
  EXPECT_EQ(As("bob")->CancelJob(job).status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(As("bob")->ListCheckpoints(job).status().code(), absl::StatusCode::kPermissionDenied);
  TempDir out;
  EXPECT_EQ(As("bob")->DownloadModel(job, 0, out.File("model.pt")).status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(As("victor")->ListAudit({}).status().code(), absl::StatusCode::kPermissionDenied);
  // `list --mine`: the owner filter.
  v1::ListJobsRequest mine;
  mine.set_owner("bob");
  EXPECT_EQ(As("bob")->ListJobs(mine)->jobs_size(), 0);
  mine.set_owner("alice");
  EXPECT_EQ(As("alice")->ListJobs(mine)->jobs(0).id(), job);
  // Its owner may, and so may an admin.
  EXPECT_TRUE(As("alice")->CancelJob(job, "done").ok());

  // The audit log has both the refusal and the cancel, with who and the result.
  auto audit = As("root")->ListAudit({});
  ASSERT_TRUE(audit.ok()) << audit.status();
  bool refused = false, cancelled = false;
  for (const auto& e : audit->entries()) {
    if (e.action() == "CancelJob" && e.target() == job && e.who() == "bob") {
      refused = e.result().rfind("PERMISSION_DENIED", 0) == 0;
    }
    if (e.action() == "CancelJob" && e.target() == job && e.who() == "alice") {
      cancelled = e.result() == "OK";
    }
  }
  EXPECT_TRUE(refused && cancelled) << audit->DebugString();
}

TEST_F(SecurityTest, OwnersSeeTheirLogsOthersSeeStatesAndMetrics) {
  const std::string job = Submit("alice", 30);
  ASSERT_FALSE(job.empty());
  auto count_logs = [&](const std::string& who, int* metrics) {
    int logs = 0;
    auto s = As(who)->WatchJob(job, {}, [&](const v1::JobEvent& e) {
      logs += e.has_log();
      *metrics += e.has_metrics();
      return true;
    });
    EXPECT_TRUE(s.ok()) << s;
    return logs;
  };
  int owner_metrics = 0, viewer_metrics = 0;
  EXPECT_GT(count_logs("alice", &owner_metrics), 0);  // the worker logs its batch size
  EXPECT_EQ(count_logs("victor", &viewer_metrics), 0);
  EXPECT_GT(viewer_metrics, 0);
  EXPECT_EQ(viewer_metrics, owner_metrics);
  EXPECT_EQ(As("alice")->GetJob(job)->state(), v1::JOB_STATE_SUCCEEDED)
      << "the local worker trained it over TLS with the coordinator's own join token";
}

TEST_F(SecurityTest, WorkersNeedAJoinTokenOrACertificateAndKeepTheirIds) {
  auto attached = [&](const std::string& id) {
    auto cluster = As("root")->GetCluster();
    for (const auto& w : cluster->workers()) {
      if (w.id() == id) return true;
    }
    return false;
  };
  const std::vector<std::string> tls = {"--tls-ca", Path("server.pem")};
  auto with = [&](std::vector<std::string> more) {
    more.insert(more.begin(), tls.begin(), tls.end());
    return more;
  };
  std::ofstream(Path("host-a.join")) << Token("host-a") << "\n";
  std::ofstream(Path("host-b.join")) << Token("host-b") << "\n";
  std::ofstream(Path("alice.join")) << Token("alice") << "\n";
  {
    WorkerProcess none(coordinator_->address(), "no-token", Path("w-none.log"), -1, with({}));
    WorkerProcess user(coordinator_->address(), "user-token", Path("w-user.log"), -1,
                       with({"--join-token-file", Path("alice.join")}));
    WorkerProcess good(coordinator_->address(), "remote-1", Path("w-good.log"), -1,
                       with({"--join-token-file", Path("host-a.join")}));
    ASSERT_TRUE(WaitFor([&] { return attached("remote-1"); }));
    EXPECT_FALSE(attached("no-token"));
    EXPECT_FALSE(attached("user-token"));
    // Another credential cannot take remote-1's id, nor evict it.
    WorkerProcess thief(coordinator_->address(), "remote-1", Path("w-thief.log"), -1,
                        with({"--join-token-file", Path("host-b.join")}));
    ASSERT_TRUE(WaitFor([&] {
      std::ifstream in(Path("w-thief.log"));
      std::string log((std::istreambuf_iterator<char>(in)), {});
      return log.find("bound to another credential") != std::string::npos;
    }));
    EXPECT_TRUE(attached("remote-1"));
  }
  // A client certificate signed by --client-ca is a credential too.
  WorkerProcess certified(
      coordinator_->address(), "cert-worker", Path("w-cert.log"), -1,
      with({"--tls-cert", Path("worker.pem"), "--tls-key", Path("worker.key")}));
  EXPECT_TRUE(WaitFor([&] { return attached("cert-worker"); }));
}

TEST_F(SecurityTest, ReportsAboutOtherWorkersJobsAreRefusedAndCounted) {
  const std::string job = Submit("alice", 1'000'000);
  ASSERT_FALSE(job.empty());
  ASSERT_TRUE(WaitFor([&] { return As("alice")->GetJob(job)->state() == v1::JOB_STATE_RUNNING; }));
  const uint64_t before = As("root")->GetCluster()->refused_worker_reports();
  auto forger = Attach("forger", Token("host-a"));
  v1::CoordinatorMessage reply;
  ASSERT_TRUE(forger->stream->Read(&reply));
  ASSERT_TRUE(reply.has_registered());
  v1::WorkerMessage forged;
  forged.mutable_finished()->set_job_id(job);
  forged.mutable_finished()->set_attempt(1);
  forged.mutable_finished()->set_outcome(v1::TASK_OUTCOME_SUCCEEDED);
  ASSERT_TRUE(forger->stream->Write(forged));
  EXPECT_TRUE(WaitFor([&] { return As("root")->GetCluster()->refused_worker_reports() > before; }));
  EXPECT_EQ(As("alice")->GetJob(job)->state(), v1::JOB_STATE_RUNNING);
  // The count reaches Prometheus, whose endpoint wants the metrics token.
  std::ifstream address_file(Path("data/metrics.address"));
  std::string metrics_address;
  address_file >> metrics_address;
  EXPECT_EQ(HttpRequest(metrics_address, "/metrics").status, 401);
  const std::string auth = "Authorization: Basic " + absl::Base64Escape("prometheus:scrape-secret");
  EXPECT_TRUE(WaitFor([&] {
    HttpResponse r = HttpRequest(metrics_address, "/metrics", auth);
    return r.status == 200 &&
           r.body.find("stoke_worker_reports_refused_total ") != std::string::npos &&
           r.body.find("stoke_worker_reports_refused_total 0") == std::string::npos;
  }));
  forger->context.TryCancel();
  forger->stream->Finish();
  EXPECT_TRUE(As("alice")->CancelJob(job).ok());
}

TEST_F(SecurityTest, ControlCharactersFromWorkersNeverReachStoreOrTerminal) {
  auto raw = Attach("evil\x1b[2J\x1b[31mred", Token("host-a"));
  v1::CoordinatorMessage reply;
  ASSERT_TRUE(raw->stream->Read(&reply));
  auto cluster = As("root")->GetCluster();
  bool found = false;
  for (const auto& w : cluster->workers()) {
    EXPECT_EQ(w.id().find('\x1b'), std::string::npos) << w.id();
    found = found || w.id() == "evil?[2J?[31mred";
  }
  EXPECT_TRUE(found) << cluster->DebugString();
  raw->context.TryCancel();
  raw->stream->Finish();
}

TEST_F(SecurityTest, TheCliSpeaksTlsAndHasAnExitCodePerRefusal) {
  CommandResult me = Stoke({"whoami"}, Token("alice"));
  EXPECT_EQ(me.exit_code, 0) << me.err;
  EXPECT_EQ(me.out, "alice (submitter)\n");
  CommandResult anonymous = Stoke({"list"}, "");
  EXPECT_EQ(anonymous.exit_code, 6) << anonymous.err;
  EXPECT_NE(anonymous.err.find("STOKE_TOKEN"), std::string::npos) << anonymous.err;
  // A token pasted with its line end works; one with a line break inside is refused with
  // the unauthenticated exit code (gRPC would abort the process on such metadata).
  EXPECT_EQ(Stoke({"whoami"}, Token("alice") + "\n").exit_code, 0);
  CommandResult broken = Stoke({"whoami"}, "stk_abc\ndef");
  EXPECT_EQ(broken.exit_code, 6) << broken.err;
  EXPECT_NE(broken.err.find("holds a space, line break or other unprintable byte at position 7"),
            std::string::npos)
      << broken.err;
  std::ofstream(Path("job.yaml")) << "model: {mlp: {hidden: [8]}}\n"
                                     "data: {synthetic: {features: 4, num_classes: 2}}\n"
                                     "training: {steps: 5, batch_size: 8}\n";
  CommandResult viewer = Stoke({"submit", Path("job.yaml")}, Token("victor"));
  EXPECT_EQ(viewer.exit_code, 7) << viewer.err;
  CommandResult audit = Stoke({"audit"}, Token("root"));
  EXPECT_EQ(audit.exit_code, 0) << audit.err;
  EXPECT_NE(audit.out.find("victor"), std::string::npos) << audit.out;
}

// Tokens change without a restart: `stoke token revoke` takes a line out of the file and
// SIGHUP makes the coordinator read it again, saying so in the audit log; a file broken
// meanwhile is refused and the tokens in force stay. An expired token is refused, naming
// when it expired.
TEST(TokenReload, ARevokedTokenIsRefusedAfterSighupAndAnExpiredOneAtOnce) {
  TempDir dir;
  const std::string tokens = dir.File("tokens");
  std::ofstream(tokens) << "# people\nroot admin " << security::HashToken("stk_root") << "\n"
                        << "alice submitter " << security::HashToken("stk_alice") << "\n"
                        << "old submitter " << security::HashToken("stk_old")
                        << " expires=2020-01-01\n";
  CoordinatorProcess::Options options{dir.File("data")};
  options.local_workers = "0";
  options.extra_args = {"--heartbeat-timeout", "6", "--auth-tokens", tokens};
  options.client_token = "stk_root";
  auto coordinator = CoordinatorProcess::Start(options);
  ASSERT_NE(coordinator, nullptr);
  auto as = [&](const std::string& token) {
    client::ClientOptions o;
    o.address = coordinator->address();
    o.token = token;
    return *client::Client::Connect(o);
  };
  EXPECT_TRUE(as("stk_alice")->GetCluster().ok());
  const auto expired = as("stk_old")->GetCluster();
  EXPECT_EQ(expired.status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_NE(expired.status().message().find("token old expired at 2020-01-01 00:00:00 UTC"),
            std::string::npos)
      << expired.status();

  const CommandResult revoke =
      RunCommand({STOKE_CLI_BINARY, "token", "revoke", "alice", "--file", tokens});
  ASSERT_EQ(revoke.exit_code, 0) << revoke.err;
  std::ifstream in(tokens);
  const std::string left((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(left.find("alice"), std::string::npos) << left;
  EXPECT_NE(left.find("# people\nroot admin"), std::string::npos) << "other lines as written";
  EXPECT_TRUE(as("stk_alice")->GetCluster().ok()) << "read again only on SIGHUP";
  ASSERT_EQ(kill(coordinator->pid(), SIGHUP), 0);
  EXPECT_TRUE(WaitFor(
      [&] {
        return as("stk_alice")->GetCluster().status().code() == absl::StatusCode::kUnauthenticated;
      },
      std::chrono::seconds(10)))
      << coordinator->Log();

  std::ofstream(tokens, std::ios::app) << "broken line\n";
  ASSERT_EQ(kill(coordinator->pid(), SIGHUP), 0);
  EXPECT_TRUE(WaitFor(
      [&] { return coordinator->Log().find("not read again on SIGHUP") != std::string::npos; },
      std::chrono::seconds(10)))
      << coordinator->Log();
  EXPECT_TRUE(as("stk_root")->GetCluster().ok()) << "the tokens in force stay";

  v1::ListAuditRequest request;
  request.set_page_size(50);
  auto audit = as("stk_root")->ListAudit(request);
  ASSERT_TRUE(audit.ok()) << audit.status();
  std::vector<std::string> reloads;
  for (const auto& entry : audit->entries()) {
    if (entry.action() == "ReloadTokens") reloads.push_back(entry.who() + " " + entry.result());
  }
  ASSERT_EQ(reloads.size(), 2u);
  // Newest first.
  EXPECT_NE(reloads[0].find("coordinator INVALID_ARGUMENT"), std::string::npos) << reloads[0];
  EXPECT_EQ(reloads[1], "coordinator OK");
  EXPECT_EQ(coordinator->Stop(), 0);
}

TEST(CoordinatorStartTest, RefusesPlaintextBeyondLoopbackAndBadSecurityFiles) {
  TempDir dir;
  CommandResult open =
      RunCommand({STOKE_COORDINATOR_BINARY, "--address", "0.0.0.0:0", "--data-dir", dir.File("d1"),
                  "--local-workers", "0", "--metrics-address", ""});
  EXPECT_NE(open.exit_code, 0);
  EXPECT_NE((open.out + open.err).find("--insecure"), std::string::npos) << open.out << open.err;
  std::ofstream(dir.File("tokens")) << "alice submitter stk_plain_token_here\n";
  CommandResult bad = RunCommand({STOKE_COORDINATOR_BINARY, "--address", "127.0.0.1:0",
                                  "--data-dir", dir.File("d2"), "--local-workers", "0",
                                  "--metrics-address", "", "--auth-tokens", dir.File("tokens")});
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE((bad.out + bad.err).find("tokens:1: hash"), std::string::npos) << bad.out << bad.err;
  // A key that is not the certificate's: named at start, not "cannot listen".
  for (const char* name : {"a", "b"}) {
    ASSERT_EQ(
        RunCommand({"/usr/bin/openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days",
                    "2", "-subj", "/CN=localhost", "-keyout", dir.File(std::string(name) + ".key"),
                    "-out", dir.File(std::string(name) + ".pem")})
            .exit_code,
        0);
  }
  CommandResult mismatched =
      RunCommand({STOKE_COORDINATOR_BINARY, "--address", "127.0.0.1:0", "--data-dir",
                  dir.File("d3"), "--local-workers", "0", "--metrics-address", "", "--tls-cert",
                  dir.File("a.pem"), "--tls-key", dir.File("b.key")});
  EXPECT_NE(mismatched.exit_code, 0);
  EXPECT_NE((mismatched.out + mismatched.err)
                .find("--tls-key " + dir.File("b.key") + " is not the key of --tls-cert " +
                      dir.File("a.pem") + ": their public keys differ"),
            std::string::npos)
      << mismatched.out << mismatched.err;
}

// The local workers' token is reused across restarts only when it is this user's own
// private file: a planted one is replaced, not trusted. The store is private too.
TEST(CoordinatorStartTest, APlantedLocalWorkerTokenIsReplacedAndTheStoreIsPrivate) {
  TempDir dir;
  std::ofstream(dir.File("tokens")) << "root admin " << security::HashToken("stk_root") << "\n";
  const std::string data = dir.File("data");
  ASSERT_EQ(mkdir(data.c_str(), 0700), 0);
  const std::string planted = data + "/local-worker.token";
  std::ofstream(planted) << "stk_planted_by_someone_else\n";
  ASSERT_EQ(chmod(planted.c_str(), 0644), 0);
  CoordinatorProcess::Options options{data};
  options.local_workers = "cpu:1";
  options.extra_args.insert(options.extra_args.end(), {"--auth-tokens", dir.File("tokens")});
  options.client_token = "stk_root";
  auto coordinator = CoordinatorProcess::Start(options);
  ASSERT_NE(coordinator, nullptr);  // its local worker attached, with the new token
  std::ifstream in(planted);
  std::string token;
  std::getline(in, token);
  EXPECT_NE(token, "stk_planted_by_someone_else");
  struct stat st;
  ASSERT_EQ(stat(planted.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_EQ(stat((data + "/stoke.db").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_NE(coordinator->Log().find("making a new token"), std::string::npos) << coordinator->Log();
}

// TLS alone does not make an exposed coordinator safe: without tokens every caller would be
// an anonymous admin, and an open /metrics names every job and host.
TEST(CoordinatorStartTest, RefusesToServeBeyondLoopbackWithoutTokensOrAMetricsToken) {
  TempDir dir;
  ASSERT_EQ(RunCommand({"/usr/bin/openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes",
                        "-days", "2", "-subj", "/CN=stoke-coordinator", "-keyout",
                        dir.File("server.key"), "-out", dir.File("server.pem")})
                .exit_code,
            0);
  std::ofstream(dir.File("tokens")) << "root admin " << security::HashToken("stk_root") << "\n";
  const auto start = [&](const std::string& data, std::vector<std::string> more) {
    std::vector<std::string> args = {
        STOKE_COORDINATOR_BINARY, "--address", "0.0.0.0:0",  "--data-dir",           dir.File(data),
        "--local-workers",        "0",         "--tls-cert", dir.File("server.pem"), "--tls-key",
        dir.File("server.key")};
    args.insert(args.end(), more.begin(), more.end());
    const CommandResult r = RunCommand(args);
    return r.out + r.err + (r.exit_code == 0 ? "" : "[refused]");
  };
  const std::string open = start("d1", {"--metrics-address", ""});
  EXPECT_NE(open.find("[refused]"), std::string::npos) << open;
  EXPECT_NE(open.find("without --auth-tokens every caller is an anonymous admin"),
            std::string::npos)
      << open;
  const std::string scraped =
      start("d2", {"--auth-tokens", dir.File("tokens"), "--metrics-address", "0.0.0.0:0"});
  EXPECT_NE(scraped.find("[refused]"), std::string::npos) << scraped;
  EXPECT_NE(scraped.find("--metrics-address 0.0.0.0:0 is reachable from other hosts: give "
                         "--metrics-token"),
            std::string::npos)
      << scraped;
  // Nothing was stored for a coordinator that did not start.
  EXPECT_FALSE(std::ifstream(dir.File("d1") + "/stoke.db").good());
}

}  // namespace
}  // namespace stoke::testing
