// SPDX-License-Identifier: Apache-2.0
// SPEC §10 W4 across instances on one PostgreSQL: a waiter on one instance learns of a
// completion made on another by polling the shared store (backing off from 50 ms), and takes
// over when the owning instance died (kill -9) and its lease ran out.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <thread>

#include "tests/integration/pg_fixture.h"

namespace idemgate::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

HttpResponse PostWaiting(uint16_t port, std::string_view key, std::string prefer) {
  HeaderList headers = kMerchant;
  headers.emplace_back("Idempotency-Key", std::string(key));
  headers.emplace_back("Prefer", std::move(prefer));
  TestClient client(port);
  return client.Request("POST", "/v1/payment_intents", headers, "{}", 20s);
}

TEST_F(PgGatewaysTest, WaiterOnAnotherInstanceGetsTheCompletionByPolling) {
  upstream_.SetBehavior(UpstreamBehavior::Respond(201, R"({"id":"pi_w"})").WithDelay(1'000));
  StartGateway(0);
  StartGateway(1);
  HttpResponse first;
  Clock::time_point first_at;
  std::thread owner([&] {
    first = Post(0, "k-poll", "{}", 10s);
    first_at = Clock::now();
  });
  ASSERT_TRUE(upstream_.WaitForRequests(1));
  HttpResponse dup = PostWaiting(ports_[1], "k-poll", "wait=10");
  Clock::time_point dup_at = Clock::now();
  owner.join();
  ASSERT_EQ(first.status, 201) << first.raw;
  EXPECT_EQ(dup.status, 201) << dup.raw;
  EXPECT_EQ(dup.Header("Idempotent-Replayed"), "true");
  EXPECT_EQ(dup.Header("Preference-Applied"), "wait=10");
  EXPECT_EQ(dup.body, first.body);
  EXPECT_EQ(upstream_.requests(), 1);
  std::printf(
      "[ figures  ] waiter on the other instance answered %lld ms after the first\n",
      static_cast<long long>(
          std::chrono::duration_cast<std::chrono::milliseconds>(dup_at - first_at).count()));
}

// W2: the owner's instance is killed; its lease runs out and the waiter on the other instance
// claims again (a takeover), executes once, and both instances replay that answer afterwards.
TEST_F(PgGatewaysTest, WaiterTakesOverAfterTheOwningInstanceIsKilled) {
  Set("upstream", "connect_timeout", "\"100ms\"");
  Set("upstream", "response_timeout", "\"500ms\"");
  Set("idempotency", "lease", "\"2s\"");
  upstream_.EnqueueBehavior(UpstreamBehavior::Act(UpstreamAction::kHang));
  upstream_.SetBehavior(UpstreamBehavior::Respond(201, R"({"id":"pi_second"})"));
  StartGateway(0);
  StartGateway(1);
  std::thread doomed([&] { Post(0, "k-kill", "{}"); });  // its gateway dies under it
  ASSERT_TRUE(upstream_.WaitForRequests(1));
  gateways_[0]->Kill(SIGKILL);
  gateways_[0]->Wait();
  doomed.join();
  HttpResponse waited = PostWaiting(ports_[1], "k-kill", "wait=2");
  EXPECT_EQ(waited.status, 201) << waited.raw;
  EXPECT_EQ(waited.body, R"({"id":"pi_second"})");
  EXPECT_FALSE(waited.Header("Idempotent-Replayed").has_value());
  EXPECT_EQ(waited.Header("Preference-Applied"), "wait=2");
  EXPECT_EQ(upstream_.requests(), 2);
  StartGateway(0);
  HttpResponse replay = Post(0, "k-kill", "{}");
  EXPECT_EQ(replay.Header("Idempotent-Replayed"), "true");
  EXPECT_EQ(replay.body, R"({"id":"pi_second"})");
  EXPECT_EQ(upstream_.requests(), 2);
}

}  // namespace
}  // namespace idemgate::test
