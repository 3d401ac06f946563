// SPDX-License-Identifier: Apache-2.0
// Through the real binary: a 409's Retry-After is when the first attempt's answer is likely
// there (the p90 of the route's recent guarded upstream times, less how long the attempt has
// run), at least 1 s and never past the lease left; with no recent times, the lease left.
#include <thread>

#include "tests/integration/gateway_fixture.h"

namespace idemgate::test {
namespace {

class RetryAfterTest : public GatewayTest {
 protected:
  void SetUp() override {
    GatewayTest::SetUp();
    Set("server", "workers", "1");  // the recent times are kept per worker
  }

  // Sends a guarded POST under `key` on `client` without reading its answer; returns once the
  // upstream has it.
  void SendInFlight(TestClient& client, const std::string& key) {
    const int before = upstream_.requests();
    HeaderList headers = kMerchant;
    headers.emplace_back("Idempotency-Key", key);
    ASSERT_TRUE(
        client.SendRaw(TestClient::BuildRequest({"POST", "/v1/payment_intents", headers, "{}"})));
    ASSERT_TRUE(upstream_.WaitForRequests(before + 1));
  }

  // The Retry-After of a retry of `key` while its first attempt (taking `delay_ms`) runs.
  int RetryAfterWhileInFlight(const std::string& key, int delay_ms) {
    upstream_.EnqueueBehavior(UpstreamBehavior::Respond(201, "{}").WithDelay(delay_ms));
    TestClient first(port_);
    SendInFlight(first, key);
    HttpResponse busy = Post(key, "{}");
    EXPECT_EQ(busy.status, 409) << busy.raw;
    EXPECT_EQ(first.ReadResponse().status, 201);
    return std::stoi(busy.Header("Retry-After").value_or("0"));
  }
};

TEST_F(RetryAfterTest, EstimatedFromTheRouteRecentUpstreamTimes) {
  StartGateway();
  // No recent times yet: the lease left (30 s default).
  EXPECT_GE(RetryAfterWhileInFlight("k-cold", 1'200), 28);
  // The route's attempts take about 1.2 s: a retry is told 1-2 s, not the 30 s lease.
  for (int i = 0; i < 3; ++i) {
    upstream_.EnqueueBehavior(UpstreamBehavior::Respond(201, "{}").WithDelay(1'200));
    ASSERT_EQ(Post("k-warm-" + std::to_string(i), "{}").status, 201);
  }
  int estimate = RetryAfterWhileInFlight("k-estimated", 1'200);
  EXPECT_GE(estimate, 1);
  EXPECT_LE(estimate, 2);
  EXPECT_EQ(upstream_.requests(), 5);  // the 409s executed nothing
}

// An attempt already slower than the route's recent ones: at least 1 s, never past the lease.
TEST_F(RetryAfterTest, AtLeastOneSecondAndNeverPastTheLease) {
  Set("idempotency", "lease", "\"4s\"");
  Set("upstream", "response_timeout", "\"3s\"");
  Set("upstream", "connect_timeout", "\"500ms\"");
  StartGateway();
  for (int i = 0; i < 3; ++i) {
    upstream_.EnqueueBehavior(UpstreamBehavior::Respond(201, "{}").WithDelay(50));
    ASSERT_EQ(Post("k-fast-" + std::to_string(i), "{}").status, 201);
  }
  upstream_.EnqueueBehavior(UpstreamBehavior::Respond(201, "{}").WithDelay(2'000));
  TestClient first(port_);
  SendInFlight(first, "k-slow");
  std::this_thread::sleep_for(std::chrono::milliseconds(600));  // past the usual 50 ms
  HttpResponse busy = Post("k-slow", "{}");
  ASSERT_EQ(busy.status, 409) << busy.raw;
  int retry_after = std::stoi(busy.Header("Retry-After").value_or("0"));
  EXPECT_GE(retry_after, 1);
  EXPECT_LE(retry_after, 4);
  EXPECT_EQ(first.ReadResponse().status, 201);
}

}  // namespace
}  // namespace idemgate::test
