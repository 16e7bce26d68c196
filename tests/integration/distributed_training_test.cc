// Several ranks training one model through c10d (Gloo on CPUs), each a real process
// (stoke_rank_runner) meeting the others over loopback TCP: they end with identical
// parameters that match one process training on the same global batch, and a rank that
// stops answering is reported as a timed-out collective instead of hanging the others.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <torch/torch.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/data_files.h"
#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"
#include "tests/support/wait.h"

namespace stoke::testing {
namespace {

using std::chrono::seconds;

// A rank runner in the background; `prefix` runs it through another command
// (`ip netns exec NAME`).
std::unique_ptr<BackgroundProcess> StartRank(const std::vector<std::string>& args,
                                             const std::string& log,
                                             const std::vector<std::string>& prefix = {}) {
  std::vector<std::string> argv = prefix;
  argv.push_back(STOKE_RANK_RUNNER_BINARY);
  argv.insert(argv.end(), args.begin(), args.end());
  return std::make_unique<BackgroundProcess>(argv, BackgroundProcess::Options{log});
}

class DistributedTrainingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    data_ = dir_.File("data");
    ASSERT_EQ(mkdir(data_.c_str(), 0755), 0);
    // 96 training images: 12 global batches of 8 per epoch, so a run crosses epochs.
    WriteMnistFolder(data_, PatternImages(96, 8, 8, 10), PatternImages(20, 8, 8, 10, 3));
  }

  // Runs `world` ranks with per-rank batch `batch` to the end; returns each rank's final
  // parameters. Fails the test if any rank fails.
  std::vector<std::vector<torch::Tensor>> Train(int world, int64_t batch, int steps, int accum,
                                                const std::string& optimizer = "sgd") {
    const std::string rendezvous = "127.0.0.1:" + std::to_string(FreePort());
    std::vector<std::unique_ptr<BackgroundProcess>> ranks;
    for (int r = 0; r < world; ++r) {
      const std::string tag = std::to_string(world) + "-" + std::to_string(r);
      ranks.push_back(StartRank(
          std::vector<std::string>{
              "rank=" + std::to_string(r), "world=" + std::to_string(world),
              "rendezvous=" + rendezvous, "data=" + data_, "batch=" + std::to_string(batch),
              "steps=" + std::to_string(steps), "accum=" + std::to_string(accum),
              "optimizer=" + optimizer, "out=" + dir_.File("params-" + tag + ".pt")},
          dir_.File("rank-" + tag + ".log")));
    }
    std::vector<std::vector<torch::Tensor>> parameters(static_cast<size_t>(world));
    for (int r = 0; r < world; ++r) {
      const std::string tag = std::to_string(world) + "-" + std::to_string(r);
      EXPECT_EQ(ranks[static_cast<size_t>(r)]->Wait(), 0)
          << "rank " << r << " of " << world << ":\n"
          << ranks[static_cast<size_t>(r)]->Log();
      if (::testing::Test::HasFailure()) return {};
      torch::load(parameters[static_cast<size_t>(r)], dir_.File("params-" + tag + ".pt"));
      logs_.push_back(ranks[static_cast<size_t>(r)]->Log());
    }
    return parameters;
  }

  static void ExpectIdentical(const std::vector<torch::Tensor>& a,
                              const std::vector<torch::Tensor>& b, const std::string& what) {
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_TRUE(torch::equal(a[i], b[i])) << what << ": parameter " << i << " differs by up to "
                                            << (a[i] - b[i]).abs().max().item<float>();
    }
  }

  static void ExpectClose(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b,
                          const std::string& what) {
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_TRUE(torch::allclose(a[i], b[i], /*rtol=*/1e-4, /*atol=*/1e-5))
          << what << ": parameter " << i << " differs by up to "
          << (a[i] - b[i]).abs().max().item<float>();
    }
  }

  TempDir dir_;
  std::string data_;
  std::vector<std::string> logs_;
};

TEST_F(DistributedTrainingTest, TwoRanksEndIdenticalAndMatchOneProcessOnTheGlobalBatch) {
  constexpr int kSteps = 30;  // two and a half epochs
  auto single = Train(1, 16, kSteps, 1);
  ASSERT_EQ(single.size(), 1u);
  auto pair = Train(2, 8, kSteps, 1);
  ASSERT_EQ(pair.size(), 2u);
  ExpectIdentical(pair[0], pair[1], "rank 0 vs rank 1");
  ExpectClose(pair[0], single[0], "2 ranks x 8 vs 1 process x 16");
  // Training moved the weights: the comparison is not between two untouched models.
  auto untouched = Train(1, 16, 1, 1);
  ASSERT_EQ(untouched.size(), 1u);
  EXPECT_FALSE(torch::allclose(untouched[0][0], single[0][0], 1e-3, 1e-3));
  EXPECT_NE(logs_[1].find("gradients in"), std::string::npos) << logs_[1];
}

// AdamW updates each bucket's parameters as soon as that bucket is reduced, part by
// part; the result must be the one update of the averaged gradients all the same.
TEST_F(DistributedTrainingTest, TwoRanksWithAdamWUpdatingBucketByBucketMatchOneProcess) {
  constexpr int kSteps = 20;
  auto single = Train(1, 16, kSteps, 1, "adamw");
  ASSERT_EQ(single.size(), 1u);
  auto pair = Train(2, 8, kSteps, 1, "adamw");
  ASSERT_EQ(pair.size(), 2u);
  ExpectIdentical(pair[0], pair[1], "rank 0 vs rank 1");
  ExpectClose(pair[0], single[0], "2 ranks x 8 vs 1 process x 16, AdamW");
  auto untouched = Train(1, 16, 1, 1, "adamw");
  ASSERT_EQ(untouched.size(), 1u);
  EXPECT_FALSE(torch::allclose(untouched[0][0], single[0][0], 1e-3, 1e-3));
}

TEST_F(DistributedTrainingTest, ThreeRanksWithAccumulationMatchOneProcess) {
  constexpr int kSteps = 12;
  auto single = Train(1, 12, kSteps, 2);
  ASSERT_EQ(single.size(), 1u);
  auto three = Train(3, 4, kSteps, 2);
  ASSERT_EQ(three.size(), 3u);
  ExpectIdentical(three[0], three[1], "rank 0 vs rank 1");
  ExpectIdentical(three[0], three[2], "rank 0 vs rank 2");
  ExpectClose(three[0], single[0], "3 ranks x 4 x 2 micro-steps vs 1 process x 12 x 2");
}

TEST_F(DistributedTrainingTest, ARankThatStopsAnsweringIsReportedAsATimedOutCollective) {
  const std::string rendezvous = "127.0.0.1:" + std::to_string(FreePort());
  auto rank = [&](int r) {
    return StartRank(
        std::vector<std::string>{"rank=" + std::to_string(r), "world=2", "rendezvous=" + rendezvous,
                                 "data=" + data_, "batch=8", "steps=100000000", "timeout=3"},
        dir_.File("hang-" + std::to_string(r) + ".log"));
  };
  auto rank0 = rank(0);
  auto rank1 = rank(1);
  ASSERT_TRUE(
      WaitFor([&] { return rank1->Log().find("step 20 ") != std::string::npos; }, seconds(60)))
      << rank0->Log() << rank1->Log();
  rank1->Signal(SIGSTOP);  // alive, connected, silent: the worst kind of peer
  const auto stopped_at = std::chrono::steady_clock::now();
  EXPECT_EQ(rank0->Wait(), 1) << rank0->Log();
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - stopped_at).count();
  EXPECT_LT(waited, 20) << "rank 0 hung for " << waited << " s";
  EXPECT_NE(rank0->Log().find("did not complete within 3 s"), std::string::npos) << rank0->Log();
  rank1->Signal(SIGKILL);
}

TEST_F(DistributedTrainingTest, ARankAloneGivesUpOnTheRendezvousNamingIt) {
  const std::string rendezvous = "127.0.0.1:" + std::to_string(FreePort());
  auto lonely =
      StartRank({"rank=0", "world=2", "rendezvous=" + rendezvous, "data=" + data_, "timeout=2"},
                dir_.File("lonely.log"));
  EXPECT_EQ(lonely->Wait(), 1);
  EXPECT_NE(lonely->Log().find("could not meet the others at " + rendezvous), std::string::npos)
      << lonely->Log();
}

// Two network namespaces ("hosts") joined by one veth pair, 10.77.N.1 and 10.77.N.2 on
// its ends and nothing else but their own loopback: a rank in one reaches the other only
// through that link, by its address. Needs CAP_NET_ADMIN (root); Valid() says if made.
class TwoHosts {
 public:
  TwoHosts() {
    const std::string id = std::to_string(getpid() % 100000);
    a_ = "stoke-a-" + id;
    b_ = "stoke-b-" + id;
    subnet_ = "10.77." + std::to_string(getpid() % 250) + ".";
    const std::vector<std::string> steps = {
        "ip netns add " + a_,
        "ip netns add " + b_,
        "ip link add va" + id + " netns " + a_ + " type veth peer name vb" + id + " netns " + b_,
        "ip -n " + a_ + " addr add " + subnet_ + "1/24 dev va" + id,
        "ip -n " + b_ + " addr add " + subnet_ + "2/24 dev vb" + id,
        "ip -n " + a_ + " link set va" + id + " up",
        "ip -n " + b_ + " link set vb" + id + " up",
        "ip -n " + a_ + " link set lo up",
        "ip -n " + b_ + " link set lo up",
    };
    for (const auto& step : steps) {
      if (std::system((step + " 2>/dev/null").c_str()) != 0) {
        why_not_ = "`" + step + "` failed (network namespaces need root)";
        return;
      }
    }
    valid_ = true;
  }
  ~TwoHosts() {
    (void)std::system(("ip netns del " + a_ + " 2>/dev/null").c_str());
    (void)std::system(("ip netns del " + b_ + " 2>/dev/null").c_str());
  }
  bool Valid() const { return valid_; }
  const std::string& why_not() const { return why_not_; }
  std::vector<std::string> On(int host) const {
    return {"ip", "netns", "exec", host == 0 ? a_ : b_};
  }
  std::string Address(int host) const { return subnet_ + (host == 0 ? "1" : "2"); }

 private:
  std::string a_, b_, subnet_, why_not_;
  bool valid_ = false;
};

TEST_F(DistributedTrainingTest, RanksOnTwoHostsMeetAtRankZerosAddressAndAgree) {
  TwoHosts hosts;
  if (!hosts.Valid()) GTEST_SKIP() << hosts.why_not();
  // The ranks cannot reach each other over loopback: 127.0.0.1 is each host's own.
  const std::string rendezvous = hosts.Address(0) + ":29400";
  std::vector<std::unique_ptr<BackgroundProcess>> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.push_back(
        StartRank(std::vector<std::string>{"rank=" + std::to_string(r), "world=2",
                                           "rendezvous=" + rendezvous, "listen=" + hosts.Address(r),
                                           "data=" + data_, "batch=8", "steps=20", "timeout=20",
                                           "out=" + dir_.File("host-" + std::to_string(r) + ".pt")},
                  dir_.File("host-" + std::to_string(r) + ".log"), hosts.On(r)));
  }
  std::vector<std::vector<torch::Tensor>> parameters(2);
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(ranks[static_cast<size_t>(r)]->Wait(), 0) << ranks[static_cast<size_t>(r)]->Log();
    torch::load(parameters[static_cast<size_t>(r)], dir_.File("host-" + std::to_string(r) + ".pt"));
  }
  ExpectIdentical(parameters[0], parameters[1], "host a vs host b");
  EXPECT_NE(ranks[1]->Log().find("rank 1 of 2 joined at " + rendezvous), std::string::npos)
      << ranks[1]->Log();
}

}  // namespace
}  // namespace stoke::testing
