// SPDX-License-Identifier: Apache-2.0
// server.busy_poll through the real binary: with its workers polling instead of sleeping between
// events, the gateway answers as it does without (fresh keys executed once, replays byte for
// byte, a duplicate sent while its first attempt runs waits for its answer, passthrough), drains
// and exits on SIGTERM, and goes back to sleep once its clients stop: an idle gateway's CPU time
// stops growing. With a window of a second, it keeps polling after a request (the key reaches
// the workers).
#include <thread>

#include "tests/integration/gateway_fixture.h"

namespace idemgate::test {
namespace {

using namespace std::chrono_literals;

class BusyPollTest : public GatewayTest {
 protected:
  void SetUp() override {
    GatewayTest::SetUp();
    Set("server", "busy_poll", "\"2ms\"");
    StartGateway();
  }
};

TEST_F(BusyPollTest, AnswersAndReplaysAsWithoutIt) {
  TestClient client(port_);
  HeaderList headers = kMerchant;
  headers.emplace_back("Idempotency-Key", "");
  std::vector<HttpResponse> first;
  for (int i = 0; i < 20; ++i) {
    headers.back().second = "bp-" + std::to_string(i);
    first.push_back(client.Request("POST", "/v1/payment_intents", headers, "{}"));
    ASSERT_EQ(first.back().status, 201) << first.back().raw;
  }
  for (int i = 0; i < 20; ++i) {
    headers.back().second = "bp-" + std::to_string(i);
    HttpResponse again = client.Request("POST", "/v1/payment_intents", headers, "{}");
    ASSERT_EQ(again.Header("Idempotent-Replayed"), "true") << again.raw;
    EXPECT_EQ(WithoutReplayedHeader(again.raw), WithoutRequestId(first[i].raw));
  }
  EXPECT_EQ(upstream_.requests(), 20);
  EXPECT_EQ(client.Request("GET", "/v1/payment_intents/pi_1", kMerchant).status, 201);
  EXPECT_EQ(upstream_.requests(), 21);
}

TEST_F(BusyPollTest, ADuplicateWaitsForTheFirstAttempt) {
  upstream_.SetBehavior(UpstreamBehavior::Respond(201, "once").WithDelay(300));
  HttpResponse a;
  std::thread first([&] { a = Post("bp-dup", "{}"); });
  ASSERT_TRUE(upstream_.WaitForRequests(1));
  TestClient client(port_);
  HeaderList headers = kMerchant;
  headers.emplace_back("Idempotency-Key", "bp-dup");
  headers.emplace_back("Prefer", "wait=5");
  HttpResponse b = client.Request("POST", "/v1/payment_intents", headers, "{}");
  first.join();
  EXPECT_EQ(a.status, 201);
  EXPECT_EQ(b.status, 201) << b.raw;
  EXPECT_EQ(b.body, "once");
  EXPECT_EQ(upstream_.requests(), 1);
}

TEST_F(BusyPollTest, AnIdleGatewaySleeps) {
  for (int i = 0; i < 50; ++i) ASSERT_EQ(Post("bp-idle-" + std::to_string(i), "{}").status, 201);
  std::this_thread::sleep_for(200ms);  // far past the 2 ms window
  const int64_t before = CpuMs(gateway_.pid());
  std::this_thread::sleep_for(1s);
  // Two workers polling without end would take one to two CPU seconds; asleep, close to none.
  EXPECT_LT(CpuMs(gateway_.pid()) - before, 250) << "the workers kept polling while idle";
}

TEST_F(BusyPollTest, AWorkerPollsThroughItsWindow) {
  Set("server", "busy_poll", "\"1s\"");
  RestartGateway();
  ASSERT_EQ(Post("bp-window", "{}").status, 201);
  const int64_t before = CpuMs(gateway_.pid());
  std::this_thread::sleep_for(300ms);
  // One worker polling for the second after its last event holds a CPU: even sharing it with
  // the rest of a loaded machine, it takes far more than a sleeping gateway's ~0 ms.
  EXPECT_GT(CpuMs(gateway_.pid()) - before, 50) << "busy_poll did not reach the workers";
}

TEST_F(BusyPollTest, DrainsAndExitsOnSigterm) {
  ASSERT_EQ(Post("bp-term", "{}").status, 201);
  gateway_.Kill(SIGTERM);
  std::optional<ExitStatus> status = gateway_.Wait();
  ASSERT_TRUE(status.has_value());
  EXPECT_TRUE(status->exited() && status->code() == 0) << status->ToString() << gateway_.log();
}

}  // namespace
}  // namespace idemgate::test
