// A script job on a GPU worker: the program sees only its worker's device (as cuda:0),
// and while it computes, `stoke top` shows that device busy and holding memory, with the
// job on it. Real coordinator and worker; skips without a CUDA device.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "tests/support/coordinator_process.h"
#include "tests/support/cuda_driver.h"
#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"
#include "tests/support/wait.h"

namespace stoke::testing {
namespace {

// Matrix products until cancelled (at most 90 s), reporting as it goes; the device count
// it sees first.
constexpr const char* kBusy = R"PY(
import time, torch, stoke
print("devices", torch.cuda.device_count(), flush=True)
a = torch.randn(8192, 8192, device="cuda")
began = time.monotonic()
step = 0
while time.monotonic() - began < 90 and not stoke.should_stop():
    for _ in range(20):
        b = a @ a
    torch.cuda.synchronize()
    step += 1
    stoke.report(step=step, loss=float(b[0, 0]) * 0, total_steps=0)
)PY";

TEST(ScriptJobGpu, TheDeviceReadingsOfAScriptJobAppearInStokeTop) {
  // Skips only where the driver has no device; a worker that cannot list it fails.
  if (const std::string why = WhyNoCudaDevice(); !why.empty()) GTEST_SKIP() << why;
  const std::string blind = WhyProgramDoesNotSee({STOKE_WORKER_BINARY, "--list-devices"}, "cuda:0");
  ASSERT_TRUE(blind.empty()) << blind;
  TempDir dir;
  CoordinatorProcess::Options options{dir.File("coordinator")};
  options.local_workers = "auto";
  auto coordinator = CoordinatorProcess::Start(options);
  ASSERT_NE(coordinator, nullptr);
  std::ofstream(dir.File("busy.py")) << kBusy;
  std::ofstream(dir.File("job.yaml")) << "name: busy\ncommand:\n  argv: [python, busy.py]\n"
                                      << "  workdir: " << dir.path() << "\n";
  const auto stoke = [&](std::vector<std::string> args) {
    args.insert(args.begin(), {STOKE_CLI_BINARY, "--address", coordinator->address()});
    return RunCommand(args);
  };
  const CommandResult submit = stoke({"submit", dir.File("job.yaml")});
  ASSERT_EQ(submit.exit_code, 0) << submit.err;
  const std::string id = submit.out.substr(0, submit.out.find('\n'));

  // The GPU's line: "host/cuda:0 cuda:0 97% 1.3 GiB / 79.6 GiB ... <job>/<rank>".
  const auto busy_with_job = [&](const std::string& top) {
    std::istringstream lines(top);
    for (std::string line; std::getline(lines, line);) {
      std::istringstream fields(line);
      std::string worker, device, utilization, memory, unit, last;
      fields >> worker >> device >> utilization >> memory >> unit;
      if (device != "cuda:0") continue;
      for (std::string field; fields >> field;) last = field;
      return std::atoi(utilization.c_str()) > 0 && std::atof(memory.c_str()) > 0 &&
             last == id + "/0";
    }
    return false;
  };
  std::string top;
  EXPECT_TRUE(WaitFor(
      [&] {
        top = stoke({"top", "--once"}).out;
        auto job = coordinator->client().GetJob(id);
        // The SDK adds the allocator's figures to what the script reports.
        return job.ok() && job->latest_metrics().memory_allocated_bytes() > 0 && busy_with_job(top);
      },
      std::chrono::seconds(60)))
      << top << coordinator->Log();
  EXPECT_EQ(stoke({"cancel", id}).exit_code, 0);
  EXPECT_NE(stoke({"logs", id}).out.find("devices 1"), std::string::npos);
}

}  // namespace
}  // namespace stoke::testing
