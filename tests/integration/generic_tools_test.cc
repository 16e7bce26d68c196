// Generic gRPC tools (grpcurl, health probes, load balancers) work against the
// coordinator unchanged: the standard health service answers SERVING, and server
// reflection lists Stoke's services. Spoken here through raw gRPC calls, as those tools do.
// Probes that cannot speak TLS gRPC get /healthz and /readyz on the metrics port, and a
// coordinator told to stop says so to both kinds of probe before it closes its listener.
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <future>
#include <thread>

#include "tests/support/coordinator_process.h"
#include "tests/support/http_get.h"
#include "tests/support/temp_dir.h"

namespace stoke::testing {
namespace {

std::string ToString(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  (void)buffer.Dump(&slices);
  std::string out;
  for (const auto& s : slices) out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return out;
}

grpc::ByteBuffer FromString(const std::string& bytes) {
  grpc::Slice slice(bytes);
  return grpc::ByteBuffer(&slice, 1);
}

class GenericTools : public ::testing::Test {
 protected:
  void SetUp() override {
    CoordinatorProcess::Options options;
    options.data_dir = dir_.path();
    options.local_workers = "0";
    coordinator_ = CoordinatorProcess::Start(options);
    ASSERT_NE(coordinator_, nullptr);
    channel_ = grpc::CreateChannel(coordinator_->address(), grpc::InsecureChannelCredentials());
  }

  TempDir dir_;
  std::unique_ptr<CoordinatorProcess> coordinator_;
  std::shared_ptr<grpc::Channel> channel_;
};

TEST_F(GenericTools, HealthServiceSaysServing) {
  grpc::GenericStub stub(channel_);
  grpc::ClientContext context;
  grpc::ByteBuffer request = FromString("");  // HealthCheckRequest{service: ""}
  grpc::ByteBuffer response;
  std::promise<grpc::Status> done;
  stub.UnaryCall(&context, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request, &response,
                 [&](grpc::Status s) { done.set_value(s); });
  grpc::Status status = done.get_future().get();
  ASSERT_TRUE(status.ok()) << status.error_message();
  // HealthCheckResponse{status: SERVING (1)}: field 1, varint 1.
  EXPECT_EQ(ToString(response), std::string("\x08\x01", 2));
}

TEST_F(GenericTools, ReflectionListsStokeServices) {
  grpc::GenericStub stub(channel_);
  grpc::ClientContext context;
  grpc::CompletionQueue cq;
  auto call = stub.PrepareCall(
      &context, "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", &cq);
  void* tag;
  bool ok;
  call->StartCall(reinterpret_cast<void*>(1));
  ASSERT_TRUE(cq.Next(&tag, &ok) && ok);
  // ServerReflectionRequest{list_services: ""}: field 7, length-delimited, empty.
  call->Write(FromString(std::string("\x3a\x00", 2)), reinterpret_cast<void*>(2));
  ASSERT_TRUE(cq.Next(&tag, &ok) && ok);
  grpc::ByteBuffer response;
  call->Read(&response, reinterpret_cast<void*>(3));
  ASSERT_TRUE(cq.Next(&tag, &ok) && ok);
  const std::string bytes = ToString(response);
  EXPECT_NE(bytes.find("stoke.v1.Coordinator"), std::string::npos);
  EXPECT_NE(bytes.find("stoke.v1.WorkerLink"), std::string::npos);
  EXPECT_NE(bytes.find("grpc.health.v1.Health"), std::string::npos);
  context.TryCancel();
  grpc::Status status;
  call->Finish(&status, reinterpret_cast<void*>(4));
  cq.Next(&tag, &ok);
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
}

// The standard health service's answer for the whole server: 1 SERVING, 2 NOT_SERVING,
// 0 when the call failed.
int HealthStatus(const std::shared_ptr<grpc::Channel>& channel) {
  grpc::GenericStub stub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
  grpc::ByteBuffer request = FromString("");
  grpc::ByteBuffer response;
  std::promise<grpc::Status> done;
  stub.UnaryCall(&context, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request, &response,
                 [&](const grpc::Status& s) { done.set_value(s); });
  if (!done.get_future().get().ok()) return 0;
  const std::string bytes = ToString(response);
  return bytes.size() == 2 && bytes[0] == '\x08' ? bytes[1] : 0;
}

TEST(Probes, HealthzAndReadyzAnswerAndADrainingCoordinatorSaysSoFirst) {
  TempDir dir;
  CoordinatorProcess::Options options;
  options.data_dir = dir.path();
  options.local_workers = "0";
  options.extra_args = {"--heartbeat-timeout", "6", "--drain-seconds", "4"};
  auto coordinator = CoordinatorProcess::Start(options);
  ASSERT_NE(coordinator, nullptr);
  std::string metrics;
  std::ifstream(dir.File("metrics.address")) >> metrics;
  ASSERT_FALSE(metrics.empty());
  auto channel = grpc::CreateChannel(coordinator->address(), grpc::InsecureChannelCredentials());
  EXPECT_EQ(HttpRequest(metrics, "/healthz").status, 200);
  const HttpResponse ready = HttpRequest(metrics, "/readyz");
  EXPECT_EQ(ready.status, 200);
  EXPECT_EQ(ready.body, "ok\n");
  EXPECT_EQ(HealthStatus(channel), 1);

  ASSERT_EQ(kill(coordinator->pid(), SIGTERM), 0);
  // Within the drain both probes say it is going, while it still answers them.
  bool drained = false;
  for (int i = 0; i < 30 && !drained; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    drained = HttpRequest(metrics, "/readyz").status == 503 && HealthStatus(channel) == 2;
  }
  EXPECT_TRUE(drained) << coordinator->Log();
  const HttpResponse draining = HttpRequest(metrics, "/readyz");
  EXPECT_EQ(draining.body, "draining: the coordinator is shutting down\n");
  EXPECT_EQ(HttpRequest(metrics, "/healthz").status, 200) << "alive while it drains";
  EXPECT_EQ(coordinator->Stop(), 0);
  EXPECT_NE(coordinator->Log().find("draining for 4 s"), std::string::npos) << coordinator->Log();
}

// Under systemd (Type=notify) the coordinator says READY=1 once it serves and STOPPING=1
// when told to stop, on the unix datagram socket $NOTIFY_SOCKET names.
TEST(Probes, ACoordinatorTellsTheServiceManagerWhenItIsReadyAndWhenItStops) {
  TempDir dir;
  const std::string socket_path = dir.File("notify.sock");
  const int listener = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(listener, 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  ASSERT_LT(socket_path.size(), sizeof(address.sun_path));
  std::memcpy(address.sun_path, socket_path.c_str(), socket_path.size());
  ASSERT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  const timeval wait{30, 0};
  setsockopt(listener, SOL_SOCKET, SO_RCVTIMEO, &wait, sizeof(wait));
  auto receive = [&] {
    char buffer[512];
    const ssize_t n = recv(listener, buffer, sizeof(buffer), 0);
    return n > 0 ? std::string(buffer, static_cast<size_t>(n)) : std::string();
  };

  CoordinatorProcess::Options options;
  options.data_dir = dir.File("data");
  options.local_workers = "0";
  setenv("NOTIFY_SOCKET", socket_path.c_str(), 1);  // the child inherits it
  auto coordinator = CoordinatorProcess::Start(options);
  unsetenv("NOTIFY_SOCKET");
  ASSERT_NE(coordinator, nullptr);
  EXPECT_EQ(receive(), "READY=1\nSTATUS=serving on " + coordinator->address());
  ASSERT_EQ(kill(coordinator->pid(), SIGTERM), 0);
  EXPECT_EQ(receive(), "STOPPING=1");
  EXPECT_EQ(coordinator->Stop(), 0);
  close(listener);
}

}  // namespace
}  // namespace stoke::testing
