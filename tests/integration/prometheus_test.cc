// The dashboards against a real Prometheus: Debian's `prometheus`, started here on
// loopback with a temp config, scrapes a real coordinator whose CPU worker trains a job;
// then every PromQL expression in dashboards/*.json is evaluated through Prometheus's
// HTTP API and must return data.
#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tests/support/coordinator_process.h"
#include "tests/support/http_get.h"
#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"
#include "tests/support/wait.h"

namespace stoke::testing {
namespace {

using std::chrono::seconds;

std::string UrlEncode(const std::string& text) {
  std::ostringstream out;
  for (unsigned char c : text) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out << c;
    } else {
      char hex[4];
      std::snprintf(hex, sizeof(hex), "%%%02X", c);
      out << hex;
    }
  }
  return out.str();
}

class PrometheusServer {
 public:
  PrometheusServer(const std::string& dir, const std::string& target) {
    address_ = "127.0.0.1:" + std::to_string(FreePort());
    const std::string config = dir + "/prometheus.yml";
    std::ofstream(config) << "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                          << "scrape_configs:\n  - job_name: stoke\n"
                          << "    static_configs:\n"
                          << "      - targets: ['" << target << "']\n";
    process_ = std::make_unique<BackgroundProcess>(
        std::vector<std::string>{"prometheus", "--config.file=" + config,
                                 "--storage.tsdb.path=" + dir + "/tsdb",
                                 "--web.listen-address=" + address_},
        BackgroundProcess::Options{dir + "/prometheus.log"});
  }
  ~PrometheusServer() {
    process_->Signal(SIGTERM);
    process_->Wait();
  }
  const std::string& address() const { return address_; }
  // The JSON answer to an instant query.
  nlohmann::json Query(const std::string& promql) const {
    const std::string body = HttpGet(address_, "/api/v1/query?query=" + UrlEncode(promql));
    return nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  }

 private:
  std::string address_;
  std::unique_ptr<BackgroundProcess> process_;
};

// Grafana's variables, as a user with "All" selected would have them.
std::string Substitute(std::string expr, const std::string& job) {
  const std::pair<std::string, std::string> values[] = {{"$job", job},
                                                        {"$host", ".+"},
                                                        {"$gpu", ".+"},
                                                        {"$cluster", ".*"},
                                                        {"$__rate_interval", "1m"}};
  for (const auto& [name, value] : values) {
    for (size_t at = expr.find(name); at != std::string::npos; at = expr.find(name, at)) {
      expr.replace(at, name.size(), value);
      at += value.size();
    }
  }
  return expr;
}

TEST(Prometheus, EveryDashboardExpressionReturnsDataForARunningJob) {
  if (RunCommand({"/bin/sh", "-c", "command -v prometheus"}).exit_code != 0) {
    GTEST_SKIP() << "Debian's prometheus is not installed (scripts/setup-deps.sh installs it)";
  }
  TempDir dir;
  // A quota group, so that the sharing panels have series to show.
  std::ofstream(dir.File("quotas.yaml")) << "groups:\n  research: {owners: [alice], cpus: 1}\n";
  CoordinatorProcess::Options options;
  options.data_dir = dir.File("coordinator");
  options.local_workers = "cpu:1";
  options.extra_args = {"--heartbeat-timeout", "6", "--quotas", dir.File("quotas.yaml")};
  auto coordinator = CoordinatorProcess::Start(options);
  ASSERT_NE(coordinator, nullptr);
  std::string metrics_address;
  std::ifstream(dir.File("coordinator/metrics.address")) >> metrics_address;
  ASSERT_FALSE(metrics_address.empty());

  v1::JobSpec spec;
  spec.set_name("scraped");
  spec.mutable_model()->mutable_mlp()->add_hidden(64);
  spec.mutable_data()->mutable_synthetic()->set_features(32);
  spec.mutable_training()->set_steps(1'000'000'000);
  spec.mutable_training()->set_batch_size(32);
  spec.mutable_metrics()->set_interval_steps(20);
  spec.mutable_eval()->set_interval_steps(100);
  spec.mutable_eval()->set_batches(1);
  auto job = coordinator->client().SubmitJob(spec);
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE(WaitFor(
      [&] {
        auto j = coordinator->client().GetJob(job->id());
        return j.ok() && j->has_latest_eval() && j->latest_metrics().samples_per_second() > 0;
      },
      seconds(60)));
  // Device readings arrive with heartbeats.
  ASSERT_TRUE(WaitFor(
      [&] {
        auto c = coordinator->client().GetCluster();
        return c.ok() && c->workers_size() == 1 && c->workers(0).has_device_stats();
      },
      seconds(30)));
  const bool have_gpus =
      coordinator->client().GetCluster()->workers(0).device_stats().source() == "nvml";

  PrometheusServer prometheus(dir.path(), metrics_address);
  ASSERT_TRUE(WaitFor(
      [&] {
        auto up = prometheus.Query("up{job=\"stoke\"} == 1");
        return up.is_object() && up["data"]["result"].size() == 1;
      },
      seconds(60)))
      << "Prometheus never scraped " << metrics_address;
  // A few more scrapes, so rate() over them has something to work on.
  std::this_thread::sleep_for(seconds(5));

  int checked = 0;
  for (const auto& entry :
       std::filesystem::directory_iterator(std::string(STOKE_SOURCE_DIR) + "/dashboards")) {
    if (entry.path().extension() != ".json") continue;
    std::ifstream in(entry.path());
    const nlohmann::json dashboard = nlohmann::json::parse(in);
    for (const auto& panel : dashboard["panels"]) {
      for (const auto& target : panel["targets"]) {
        const std::string expr = Substitute(target["expr"].get<std::string>(), job->id());
        // Power and temperature come from NVML: a CPU-only cluster has none to show.
        if (!have_gpus && (expr.find("power_watts") != std::string::npos ||
                           expr.find("temperature_celsius") != std::string::npos)) {
          continue;
        }
        const nlohmann::json answer = prometheus.Query(expr);
        ASSERT_TRUE(answer.is_object()) << expr;
        EXPECT_EQ(answer["status"], "success") << entry.path().filename() << ": " << expr << "\n"
                                               << answer.dump();
        // A straggler's series exists only while a rank of several straggles (this job has
        // one rank; tests/integration/straggler_test.cc scrapes one): the expression must
        // evaluate, and its empty answer is the healthy job's.
        if (expr.find("stoke_job_straggler") != std::string::npos) continue;
        EXPECT_FALSE(answer["data"]["result"].empty())
            << entry.path().filename() << " panel \"" << panel["title"].get<std::string>()
            << "\": no data for " << expr;
        ++checked;
      }
    }
    // Template variables' queries return the values a user picks from.
    for (const auto& variable : dashboard["templating"]["list"]) {
      if (variable["type"] != "query") continue;
      std::string query = variable["definition"].get<std::string>();
      const auto open = query.find('(');
      ASSERT_EQ(query.rfind("label_values(", 0), 0u) << query;
      query = Substitute(query.substr(open + 1, query.rfind(',') - open - 1), job->id());
      EXPECT_FALSE(prometheus.Query(query)["data"]["result"].empty()) << query;
    }
  }
  EXPECT_GE(checked, 30);
}

}  // namespace
}  // namespace stoke::testing
