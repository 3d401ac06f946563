// SPDX-License-Identifier: Apache-2.0
// Through the real binary: every /metrics series moves with its outcome; /healthz and /readyz.
#include <chrono>
#include <cstdlib>
#include <thread>

#include "tests/integration/gateway_fixture.h"

namespace idemgate::test {
namespace {

using namespace std::chrono_literals;

class AdminTest : public GatewayTest {
 protected:
  HttpResponse Admin(std::string_view method, std::string_view target) {
    TestClient client(admin_port_);
    return client.Request(method, target);
  }

  std::string Scrape() {
    HttpResponse r = Admin("GET", "/metrics");
    EXPECT_EQ(r.status, 200) << r.raw;
    EXPECT_EQ(r.Header("Content-Type"), "text/plain; version=0.0.4; charset=utf-8");
    return r.body;
  }
};

double Requests(const std::string& text, const std::string& outcome) {
  return MetricValue(text, "idemgate_requests_total{outcome=\"" + outcome + "\"}");
}

TEST_F(AdminTest, EveryCounterMovesWithItsOutcome) {
  Set("upstream", "response_timeout", "\"1s\"");
  StartWithAdmin();
  std::string before = Scrape();
  for (const char* outcome :
       {"fresh", "replay", "in_flight", "takeover", "mismatch", "passthrough"}) {
    EXPECT_EQ(Requests(before, outcome), 0) << outcome << "\n" << before;
  }

  ASSERT_EQ(Post("m-1", "{\"a\":1}").status, 201);                      // fresh, 2xx
  ASSERT_EQ(Post("m-1", "{\"a\":1}").status, 201);                      // replay
  ASSERT_EQ(Post("m-1", "{\"a\":2}").status, 422);                      // mismatch
  ASSERT_EQ(Post("m-2", "{}", "/v1/payment_intents", {}).status, 401);  // rejected
  {
    TestClient client(port_);
    ASSERT_EQ(client.Request("GET", "/v1/things").status, 201);  // passthrough, 2xx
  }
  upstream_.EnqueueBehavior(UpstreamBehavior::Respond(500, "boom"));
  ASSERT_EQ(Post("m-3", "{}").status, 500);  // fresh, 5xx, stored
  upstream_.EnqueueBehavior(UpstreamBehavior::Act(UpstreamAction::kHang));
  std::thread hung([&] { EXPECT_EQ(Post("m-4", "{}").status, 504); });  // fresh, timeout
  ASSERT_TRUE(upstream_.WaitForRequests(4));
  EXPECT_EQ(Post("m-4", "{}").status, 409);  // in_flight
  hung.join();
  upstream_.Stop();
  ASSERT_EQ(Post("m-5", "{}").status, 502);  // fresh, refused: released

  std::string m = Scrape();
  EXPECT_EQ(Requests(m, "fresh"), 4) << m;
  EXPECT_EQ(Requests(m, "replay"), 1);
  EXPECT_EQ(Requests(m, "mismatch"), 1);
  EXPECT_EQ(Requests(m, "in_flight"), 1);
  EXPECT_EQ(Requests(m, "passthrough"), 1);
  EXPECT_EQ(Requests(m, "takeover"), 0);
  EXPECT_EQ(MetricValue(m, "idemgate_requests_total{outcome=\"rejected\",code=\"missing_credentials\"}"),
            1);
  EXPECT_EQ(MetricValue(m, "idemgate_requests_total{outcome=\"rejected\",code=\"bad_request\"}"), 0);
  EXPECT_EQ(MetricValue(m, "idemgate_error_responses_total{code=\"idempotency_key_reused\"}"), 1);
  EXPECT_EQ(MetricValue(m, "idemgate_error_responses_total{code=\"idempotency_key_in_use\"}"), 1);
  EXPECT_EQ(MetricValue(m, "idemgate_error_responses_total{code=\"upstream_timeout\"}"), 1);
  EXPECT_EQ(MetricValue(m, "idemgate_error_responses_total{code=\"upstream_unavailable\"}"), 1);
  EXPECT_EQ(MetricValue(m, "idemgate_upstream_responses_total{class=\"2xx\"}"), 2);
  EXPECT_EQ(MetricValue(m, "idemgate_upstream_responses_total{class=\"5xx\"}"), 1);
  EXPECT_EQ(MetricValue(m, "idemgate_upstream_responses_total{class=\"4xx\"}"), 0);
  EXPECT_EQ(MetricValue(m, "idemgate_upstream_errors_total{kind=\"timeout\"}"), 1);
  EXPECT_EQ(MetricValue(m, "idemgate_upstream_errors_total{kind=\"unavailable\"}"), 1);
  EXPECT_EQ(MetricValue(m, "idemgate_upstream_errors_total{kind=\"failed\"}"), 0);
  // Every answer is in the request histogram; only the five that went upstream in the other.
  // The request histogram has one series per outcome (9 answers in all).
  auto duration_count = [&](const char* outcome) {
    return MetricValue(
        m, std::string("idemgate_request_duration_seconds_count{outcome=\"") + outcome + "\"}");
  };
  EXPECT_EQ(duration_count("fresh"), 4) << m;
  EXPECT_EQ(duration_count("replay"), 1);
  EXPECT_EQ(duration_count("mismatch"), 1);
  EXPECT_EQ(duration_count("in_flight"), 1);
  EXPECT_EQ(duration_count("passthrough"), 1);
  EXPECT_EQ(duration_count("rejected"), 1);
  EXPECT_EQ(duration_count("takeover"), 0);
  EXPECT_EQ(MetricValue(m, "idemgate_request_duration_seconds_bucket{outcome=\"fresh\",le=\"+Inf\"}"), 4);
  // The 409 counted once, under in_flight: no rejected series for its code (it could not move).
  EXPECT_EQ(m.find("outcome=\"rejected\",code=\"idempotency_key_in_use\""), std::string::npos);
  EXPECT_EQ(m.find("outcome=\"rejected\",code=\"idempotency_key_reused\""), std::string::npos);
  EXPECT_EQ(MetricValue(m, "idemgate_upstream_duration_seconds_count"), 5);
  EXPECT_EQ(MetricValue(m, "idemgate_store_operation_duration_seconds_count{op=\"claim\"}"), 4);
  EXPECT_EQ(MetricValue(m, "idemgate_store_operation_duration_seconds_count{op=\"complete\"}"), 3);
  EXPECT_EQ(MetricValue(m, "idemgate_store_operation_duration_seconds_count{op=\"release\"}"), 1);
  // Every claim, complete and release is one op of some group commit.
  EXPECT_GE(MetricValue(m, "idemgate_store_batch_size_count"), 1);
  EXPECT_EQ(MetricValue(m, "idemgate_store_batch_size_sum"), 8);
  // One synced write per group commit, each of them timed.
  EXPECT_EQ(MetricValue(m, "idemgate_store_write_duration_seconds_count"),
            MetricValue(m, "idemgate_store_batch_size_count"));
  EXPECT_GT(MetricValue(m, "idemgate_store_write_duration_seconds_sum"), 0);
  EXPECT_GE(MetricValue(m, "idemgate_store_records"), 1);
}

TEST_F(AdminTest, OpenConnectionsGauge) {
  StartWithAdmin();
  EXPECT_EQ(MetricValue(Scrape(), "idemgate_connections_open"), 0);
  {
    TestClient a(port_), b(port_);
    ASSERT_EQ(a.Request("GET", "/").status, 201);
    ASSERT_EQ(b.Request("GET", "/").status, 201);
    EXPECT_EQ(MetricValue(Scrape(), "idemgate_connections_open"), 2);
  }
  auto deadline = std::chrono::steady_clock::now() + 5s;
  double open = -1;
  while (std::chrono::steady_clock::now() < deadline) {
    open = MetricValue(Scrape(), "idemgate_connections_open");
    if (open == 0) break;
    std::this_thread::sleep_for(20ms);
  }
  EXPECT_EQ(open, 0);
  // Every close is counted with its reason: both clients closed their idle connections.
  EXPECT_EQ(MetricValue(Scrape(), "idemgate_connections_closed_total{reason=\"client_closed\"}"), 2);
  EXPECT_EQ(MetricValue(Scrape(), "idemgate_connections_closed_total{reason=\"socket_error\"}"), 0);
}

TEST_F(AdminTest, HealthzAnswersOk) {
  StartWithAdmin();
  HttpResponse r = Admin("GET", "/healthz");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, "ok\n");
  EXPECT_EQ(Admin("GET", "/nope").status, 404);
  EXPECT_EQ(Admin("DELETE", "/metrics").status, 405);
}

TEST_F(AdminTest, ReadyzFollowsTheUpstream) {
  StartWithAdmin();
  HttpResponse ready = Admin("GET", "/readyz");
  EXPECT_EQ(ready.status, 200) << ready.raw;
  EXPECT_EQ(ready.body, "{\"ready\":true,\"store\":\"ok\",\"upstream\":\"ok\"}\n");
  // The probe leaves no record behind and does not count as a request.
  EXPECT_EQ(Requests(Scrape(), "fresh"), 0);

  upstream_.Stop();
  HttpResponse down = Admin("GET", "/readyz");
  EXPECT_EQ(down.status, 503) << down.raw;
  EXPECT_NE(down.body.find("\"ready\":false"), std::string::npos) << down.body;
  EXPECT_NE(down.body.find("\"store\":\"ok\""), std::string::npos) << down.body;
  EXPECT_NE(down.body.find("\"upstream\":\"cannot connect to 127.0.0.1:"), std::string::npos)
      << down.body;
  EXPECT_NE(down.body.find("refused"), std::string::npos) << down.body;
}

TEST_F(AdminTest, AdminListenerOffWhenAddressEmpty) {
  StartGateway();  // the fixture sets [admin] address = ""
  EXPECT_EQ(gateway_.log().find("admin listening on"), std::string::npos) << gateway_.log();
  EXPECT_EQ(Post("off-1", "{}").status, 201);
}

}  // namespace
}  // namespace idemgate::test
