// SPDX-License-Identifier: Apache-2.0
// Through the real binary: each server of an upstream group has its own series on /metrics
// (calls, failures by kind, times taken out, the state each loop sees it in), and /readyz names
// a route group whose every server is out, without counting it against readiness.
#include <unistd.h>

#include <chrono>
#include <thread>

#include "tests/integration/gateway_fixture.h"
#include "tests/support/loopback.h"

namespace idemgate::test {
namespace {

std::string Url(uint16_t port) { return "\"http://127.0.0.1:" + std::to_string(port) + "\""; }

// A loopback port bound but not listening: every connection to it is refused.
class RefusingPort {
 public:
  RefusingPort() { fd_ = BindLoopback(&port_).Release(); }
  ~RefusingPort() { close(fd_); }
  uint16_t port() const { return port_; }

 private:
  int fd_ = -1;
  uint16_t port_ = 0;
};

class UpstreamServerMetricsTest : public GatewayTest {
 protected:
  void SetUp() override {
    GatewayTest::SetUp();
    sections_["upstream"].erase("url");
    Set("server", "workers", "1");
    Set("upstream", "fail_timeout", "\"1h\"");
  }
  static std::string Series(const std::string& name, const std::string& group, uint16_t port,
                            const std::string& more = "") {
    return name + "{group=\"" + group + "\",server=\"127.0.0.1:" + std::to_string(port) +
           "\",address=\"127.0.0.1\"" + (more.empty() ? "" : "," + more) + "}";
  }
  HttpResponse Get(const std::string& target = "/v1/things") {
    TestClient client(port_);
    return client.Request("GET", target, kMerchant);
  }
  // The scrape once `series` has `value` (the loops update the state as calls end).
  std::string ScrapeWhen(const std::string& series, double value) {
    std::string text = Scrape();
    for (int i = 0; i < 200 && MetricValue(text, series) != value; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(25));
      text = Scrape();
    }
    return text;
  }
};

// One server refuses: its one call is an "unavailable" failure and it is taken out once; the
// other took every call. Each server's state says so.
TEST_F(UpstreamServerMetricsTest, EachServerHasItsCallsFailuresAndState) {
  RefusingPort down;
  Set("upstream", "servers", "[" + Url(down.port()) + ", " + Url(upstream_.port()) + "]");
  StartWithAdmin();
  for (int i = 0; i < 6; ++i) ASSERT_EQ(Get().status, 201);
  const std::string text =
      ScrapeWhen(Series("idemgate_upstream_server_requests_total", "default", upstream_.port()), 6);
  auto value = [&](const char* name, uint16_t port, const std::string& more = "") {
    return MetricValue(text, Series(name, "default", port, more));
  };
  EXPECT_EQ(value("idemgate_upstream_server_requests_total", upstream_.port()), 6) << text;
  EXPECT_EQ(value("idemgate_upstream_server_requests_total", down.port()), 1) << text;
  EXPECT_EQ(value("idemgate_upstream_server_errors_total", down.port(), "kind=\"unavailable\""), 1);
  EXPECT_EQ(
      value("idemgate_upstream_server_errors_total", upstream_.port(), "kind=\"unavailable\""), 0);
  EXPECT_EQ(value("idemgate_upstream_server_taken_out_total", down.port(), "reason=\"connect\""),
            1);
  EXPECT_EQ(value("idemgate_upstream_server_state", down.port(), "state=\"taken_out\""), 1);
  EXPECT_EQ(value("idemgate_upstream_server_state", down.port(), "state=\"up\""), 0);
  EXPECT_EQ(value("idemgate_upstream_server_state", upstream_.port(), "state=\"up\""), 1);
  EXPECT_EQ(upstream_.requests(), 6);
}

// A server whose health check fails is in state health_check_failed, counted once.
TEST_F(UpstreamServerMetricsTest, AFailedHealthCheckIsItsOwnState) {
  FakeUpstream sick;
  ASSERT_TRUE(sick.Start());
  sick.SetBehavior(UpstreamBehavior::Respond(503, "sick"));
  Set("upstream", "health_path", "\"/health\"");
  Set("upstream", "health_interval", "\"100ms\"");
  Set("upstream", "servers", "[" + Url(upstream_.port()) + ", " + Url(sick.port()) + "]");
  StartWithAdmin();
  const std::string state = Series("idemgate_upstream_server_state", "default", sick.port(),
                                   "state=\"health_check_failed\"");
  const std::string text = ScrapeWhen(state, 1);
  EXPECT_EQ(MetricValue(text, state), 1) << text;
  EXPECT_EQ(MetricValue(text, Series("idemgate_upstream_server_taken_out_total", "default",
                                     sick.port(), "reason=\"health_check\"")),
            1);
  EXPECT_EQ(MetricValue(text, Series("idemgate_upstream_server_state", "default", upstream_.port(),
                                     "state=\"up\"")),
            1);
}

// A route group whose servers all fail their health check: /readyz names it and why, stays 200
// (the default group answers), and says nothing of a group that has a server up.
TEST_F(UpstreamServerMetricsTest, ReadyzNamesTheRouteGroupWhoseServersAreAllOut) {
  RefusingPort d1, d2;
  FakeUpstream other;
  ASSERT_TRUE(other.Start());
  Set("upstream", "url", Url(upstream_.port()));
  Set("upstreams.reports", "servers", "[" + Url(d1.port()) + ", " + Url(d2.port()) + "]");
  Set("upstreams.reports", "health_path", "\"/health\"");
  Set("upstreams.reports", "health_interval", "\"100ms\"");
  Set("upstreams.ledger", "url", Url(other.port()));
  Set("admin", "address", "\"127.0.0.1:0\"");
  const std::string path = dir_.WriteFile(
      "idemgate.toml", ConfigText() +
                           "[[routes]]\nprefix = \"/reports\"\nupstream = \"reports\"\n"
                           "[[routes]]\nprefix = \"/ledger\"\nupstream = \"ledger\"\n");
  ASSERT_TRUE(gateway_.Start(IDEMGATE_BIN, {"--config", path})) << gateway_.error();
  port_ = gateway_.WaitForPort();
  admin_port_ = gateway_.WaitForPort("admin listening on ");
  ASSERT_NE(admin_port_, 0) << gateway_.log();
  ScrapeWhen(Series("idemgate_upstream_server_state", "reports", d2.port(),
                    "state=\"health_check_failed\""),
             1);
  HttpResponse ready = TestClient(admin_port_).Request("GET", "/readyz");
  EXPECT_EQ(ready.status, 200) << ready.body;
  EXPECT_NE(ready.body.find("\"ready\":true"), std::string::npos) << ready.body;
  EXPECT_NE(ready.body.find("\"route_groups\":[\"reports: every server is out: 127.0.0.1:" +
                            std::to_string(d1.port()) + " health check /health failed: "),
            std::string::npos)
      << ready.body;
  EXPECT_NE(ready.body.find("127.0.0.1:" + std::to_string(d2.port()) + " health check"),
            std::string::npos)
      << ready.body;
  EXPECT_EQ(ready.body.find("ledger"), std::string::npos) << ready.body;
  EXPECT_EQ(Get("/reports/q1").status, 502);
  EXPECT_EQ(Get("/ledger/x").status / 100, 2);
  EXPECT_EQ(Get("/v1/things").status, 201);
}

}  // namespace
}  // namespace idemgate::test
