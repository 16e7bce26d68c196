// Generic gRPC tools (grpcurl, health probes, load balancers) work against the
// coordinator unchanged: the standard health service answers SERVING, and server
// reflection lists Stoke's services. Spoken here through raw gRPC calls, as those tools do.
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <future>

#include "tests/support/coordinator_process.h"
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

}  // namespace
}  // namespace stoke::testing
