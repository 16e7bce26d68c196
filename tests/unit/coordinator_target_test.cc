// Coordinator address lists: one address passes through untouched, a list becomes one
// channel that reaches whichever listed coordinator listens, and bad lists are refused
// naming the flag.
#include "security/coordinator_target.h"

#include <gtest/gtest.h>

#include "stoke/v1/coordinator.grpc.pb.h"
#include "tests/support/subprocess.h"

namespace stoke::security {
namespace {

TEST(CoordinatorTarget, OneAddressIsUsedAsGiven) {
  grpc::ChannelArguments args;
  EXPECT_EQ(*CoordinatorTarget("coordinator.example:50051", "--coordinator", &args),
            "coordinator.example:50051");
}

TEST(CoordinatorTarget, AListBecomesOneTargetOfNumericAddresses) {
  grpc::ChannelArguments args;
  EXPECT_EQ(*CoordinatorTarget("127.0.0.1:5001, localhost:5002", "--coordinator", &args),
            "ipv4:127.0.0.1:5001,127.0.0.1:5002");
  EXPECT_EQ(*CoordinatorTarget("[::1]:5001,[::1]:5002", "--coordinator", &args),
            "ipv6:[::1]:5001,[::1]:5002");
}

TEST(CoordinatorTarget, BadListsAreRefusedNamingTheFlag) {
  for (const char* bad : {"127.0.0.1:5001,", "127.0.0.1:5001,127.0.0.1", "a:1,[::1]:2",
                          "127.0.0.1:5001,no-such-host.invalid:1", "127.0.0.1:x,127.0.0.1:1"}) {
    grpc::ChannelArguments args;
    auto target = CoordinatorTarget(bad, "--coordinator", &args);
    ASSERT_FALSE(target.ok()) << bad;
    EXPECT_EQ(target.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(target.status().message().find("--coordinator"), absl::string_view::npos)
        << target.status();
  }
}

// The first address has nothing listening (a standby); the channel connects to the second.
TEST(CoordinatorTarget, TheChannelReachesTheCoordinatorThatListens) {
  grpc::ServerBuilder builder;
  v1::Coordinator::CallbackService coordinator;  // a server needs a service to start
  builder.RegisterService(&coordinator);
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  auto server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  grpc::ChannelArguments args;
  const std::string list = "127.0.0.1:" + std::to_string(stoke::testing::FreePort()) +
                           ",127.0.0.1:" + std::to_string(port);
  auto target = CoordinatorTarget(list, "--coordinator", &args);
  ASSERT_TRUE(target.ok()) << target.status();
  auto channel = grpc::CreateCustomChannel(*target, grpc::InsecureChannelCredentials(), args);
  EXPECT_TRUE(
      channel->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(10)));
  server->Shutdown();
}

}  // namespace
}  // namespace stoke::security
