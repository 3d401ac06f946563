// SPDX-License-Identifier: Apache-2.0
// Through the real binary: /metrics tells what is running (idemgate_build_info, process_*) and
// what SIGHUP did (reloads by result, the running config's hash and load time).
#include <chrono>
#include <cstdlib>
#include <regex>
#include <thread>

#include "tests/integration/gateway_fixture.h"

namespace idemgate::test {
namespace {

using namespace std::chrono_literals;

class OpsMetricsTest : public GatewayTest {
 protected:
  // Rewrites the config file and sends SIGHUP; waits for the gateway's log line about it.
  void Reload(const std::string& text, const std::string& expect_line, int nth) {
    dir_.WriteFile("idemgate.toml", text);
    ASSERT_TRUE(gateway_.Kill(SIGHUP));
    auto deadline = std::chrono::steady_clock::now() + 5s;
    while (Count(gateway_.log(), expect_line) < nth && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(10ms);
    ASSERT_EQ(Count(gateway_.log(), expect_line), nth) << gateway_.log();
  }
  static int Count(const std::string& text, const std::string& needle) {
    int n = 0;
    for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1))
      ++n;
    return n;
  }
};

TEST_F(OpsMetricsTest, BuildInfoAndProcess) {
  StartWithAdmin();
  std::string m = Scrape();
  static const std::regex kBuild(
      R"re(\nidemgate_build_info\{version="\d+\.\d+\.\d+",commit="([0-9a-f]+|unknown)",)re"
      R"re(libevent="2\.[^"]+",openssl="OpenSSL 3[^"]+",rocksdb="\d+\.\d+\.\d+"\} 1\n)re");
  EXPECT_TRUE(std::regex_search(m, kBuild)) << m;
  EXPECT_GT(MetricValue(m, "process_resident_memory_bytes"), 1e6) << m;
  EXPECT_GT(MetricValue(m, "process_open_fds"), 5) << m;  // listeners, the store, the admin socket
  EXPECT_GT(MetricValue(m, "process_max_fds"), MetricValue(m, "process_open_fds"));
  EXPECT_GE(MetricValue(m, "process_cpu_seconds_total"), 0);
  double now = std::chrono::duration_cast<std::chrono::seconds>(
                   std::chrono::system_clock::now().time_since_epoch())
                   .count();
  EXPECT_NEAR(MetricValue(m, "process_start_time_seconds"), now, 60);
}

TEST_F(OpsMetricsTest, ReloadsByResultAndTheRunningConfigsHash) {
  StartWithAdmin();
  std::string m = Scrape();
  EXPECT_EQ(MetricValue(m, "idemgate_config_reloads_total{result=\"success\"}"), 0) << m;
  EXPECT_EQ(MetricValue(m, "idemgate_config_reloads_total{result=\"failure\"}"), 0);
  EXPECT_EQ(MetricValue(m, "idemgate_config_last_reload_successful"), 1);
  std::smatch hash;
  static const std::regex kInfo("idemgate_config_info[{]hash=\"([0-9a-f]{16})\"[}] 1");
  ASSERT_TRUE(std::regex_search(m, hash, kInfo)) << m;
  const std::string first_hash = hash[1];

  Reload("[listen\n", "reload failed", 1);  // broken: kept the running config
  m = Scrape();
  EXPECT_EQ(MetricValue(m, "idemgate_config_reloads_total{result=\"failure\"}"), 1) << m;
  EXPECT_EQ(MetricValue(m, "idemgate_config_last_reload_successful"), 0);
  EXPECT_NE(m.find("idemgate_config_info{hash=\"" + first_hash + "\"} 1"), std::string::npos);

  Set("limits", "client_timeout", "\"9s\"");  // a live key
  Reload(ConfigText(), "config reloaded", 1);
  m = Scrape();
  EXPECT_EQ(MetricValue(m, "idemgate_config_reloads_total{result=\"success\"}"), 1) << m;
  EXPECT_EQ(MetricValue(m, "idemgate_config_last_reload_successful"), 1);
  EXPECT_EQ(m.find("idemgate_config_info{hash=\"" + first_hash + "\"}"), std::string::npos) << m;
  EXPECT_GT(MetricValue(m, "idemgate_config_loaded_timestamp_seconds"), 1e9);
}

}  // namespace
}  // namespace idemgate::test
