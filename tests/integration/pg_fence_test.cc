// SPDX-License-Identifier: Apache-2.0
// SPEC §12 through the binary: two gateways on one real PostgreSQL in front of the demo payment
// API writing its intents into that same database and fencing them (docs/fencing.md). What a
// user would see: the answers, and how many intents the database holds (which survives kill -9).
#include <gtest/gtest.h>

#include <csignal>
#include <string>
#include <thread>

#include "tests/integration/pg_fixture.h"
#include "tests/support/demo_api.h"

namespace idemgate::test {
namespace {

using namespace std::chrono_literals;

class PgFenceGatewaysTest : public PgGatewaysTest {
 protected:
  void SetUp() override {
    PgGatewaysTest::SetUp();
    // The demo backend answers after up to 1 s plus a PostgreSQL transaction; under the
    // sanitizers and the cluster tests beside them that transaction has taken over 0.5 s, so the
    // answer gets 3 s of room (lease > connect_timeout + response_timeout, SPEC C4).
    Set("upstream", "connect_timeout", "\"100ms\"");
    Set("upstream", "response_timeout", "\"4s\"");
    Set("idempotency", "lease", "\"5s\"");
  }
  // The demo API on the gateways' database; the gateways go to it.
  void StartDemo(int delay_ms, int hold_first_ms, bool fence = true) {
    DemoApi::Options o;
    o.pg_dsn = pg_.Dsn(0);
    o.fence = fence;
    o.delay_ms = delay_ms;
    o.hold_first_ms = hold_first_ms;
    ASSERT_TRUE(demo_.Start(o));
    Set("upstream", "url", "\"http://127.0.0.1:" + std::to_string(demo_.port()) + "\"");
  }
  std::string Intents(const std::string& what = "count(*)") {
    std::string out, error;
    EXPECT_TRUE(pg_.Exec(0, "SELECT " + what + " FROM demo_intents", &out, &error)) << error;
    return out;
  }
  bool WaitForIntents(const std::string& n) {
    for (int i = 0; i < 500; ++i) {
      if (Intents() == n) return true;
      std::this_thread::sleep_for(10ms);
    }
    return false;
  }
  // Retries through gateway `i` while it answers 409 (the lease of the killed attempt).
  HttpResponse RetryPastTheLease(size_t i, const std::string& key, const std::string& body) {
    HttpResponse r;
    auto deadline = std::chrono::steady_clock::now() + 15s;
    do {
      r = Post(i, key, body);
      if (r.status == 409) std::this_thread::sleep_for(100ms);
    } while (r.status == 409 && std::chrono::steady_clock::now() < deadline);
    return r;
  }
  void KillGateway(size_t i) {
    gateways_[i]->Kill(SIGKILL);
    gateways_[i]->Wait();
  }
  DemoApi demo_;
};

// The backend committed (fence and intent in one transaction), then the gateway running the
// attempt died before its answer came back: the retry on the other instance gets the stored 502
// "attempt 1 executed; its answer was lost", never a second intent, and replays it.
TEST_F(PgFenceGatewaysTest, KilledAfterTheBackendCommittedTheRetryGetsTheStored502) {
  StartDemo(/*delay_ms=*/1'000, 0);
  StartGateway(0);
  StartGateway(1);
  const std::string body = R"({"amount":"4200"})";
  std::thread doomed([&] { Post(0, "pay-1", body); });
  ASSERT_TRUE(WaitForIntents("1"));
  KillGateway(0);
  doomed.join();
  HttpResponse lost = RetryPastTheLease(1, "pay-1", body);
  EXPECT_EQ(lost.status, 502) << lost.raw;
  EXPECT_EQ(ErrorCodeOf(lost), "upstream_failed");
  EXPECT_NE(lost.body.find("Attempt 1 of this request executed; its answer was lost"),
            std::string::npos)
      << lost.body;
  HttpResponse replay = Post(1, "pay-1", body);
  EXPECT_EQ(replay.status, 502);
  EXPECT_EQ(replay.Header("Idempotent-Replayed"), "true");
  EXPECT_EQ(Intents(), "1");
  EXPECT_EQ(demo_.executions(), 1);  // the retry never reached the backend
  EXPECT_EQ(Intents("attempt"), "1");
}

// The gateway died while its request was at the backend, before the backend's transaction ran
// (held, never executed): no fence, so the retry on the other instance takes over and executes
// attempt 2, once.
TEST_F(PgFenceGatewaysTest, KilledBeforeTheBackendExecutedTheRetryExecutesOnce) {
  StartDemo(0, /*hold_first_ms=*/-1);
  StartGateway(0);
  StartGateway(1);
  const std::string body = R"({"amount":"4300"})";
  std::thread doomed([&] { Post(0, "pay-2", body); });
  ASSERT_TRUE(demo_.WaitForExecutions(1));
  KillGateway(0);
  doomed.join();
  HttpResponse made = RetryPastTheLease(1, "pay-2", body);
  EXPECT_EQ(made.status, 201) << made.raw;
  EXPECT_EQ(Post(1, "pay-2", body).Header("Idempotent-Replayed"), "true");
  EXPECT_EQ(Intents(), "1");
  EXPECT_EQ(Intents("attempt"), "2");
}

// The first attempt reaches the backend's database late -- after the gateway running it died and
// the other instance took over and completed attempt 2. Its fence fails; it rolls back; the key
// executed once, by attempt 2.
TEST_F(PgFenceGatewaysTest, StaleAttemptReachingTheBackendAfterItsTakeoverIsFenced) {
  StartDemo(0, /*hold_first_ms=*/8'000);  // reaches the database 3 s after the lease ends
  StartGateway(0);
  StartGateway(1);
  const std::string body = R"({"amount":"4400"})";
  std::thread doomed([&] { Post(0, "pay-3", body); });
  ASSERT_TRUE(demo_.WaitForExecutions(1));
  KillGateway(0);
  doomed.join();
  HttpResponse made = RetryPastTheLease(1, "pay-3", body);
  EXPECT_EQ(made.status, 201) << made.raw;
  EXPECT_EQ(Intents("attempt"), "2");
  for (int i = 0; i < 100 && demo_.fenced() == 0; ++i) std::this_thread::sleep_for(100ms);
  EXPECT_EQ(demo_.fenced(), 1);  // attempt 1 ran its transaction, and was refused
  EXPECT_EQ(Intents(), "1");
  EXPECT_EQ(Post(1, "pay-3", body).Header("Idempotent-Replayed"), "true");
}

// The control: the same crash as the first test with a backend that does not fence. The retry
// takes over and executes again -- two intents for one key, which fencing prevents.
TEST_F(PgFenceGatewaysTest, WithoutTheFenceTheSameCrashExecutesTwice) {
  StartDemo(1'000, 0, /*fence=*/false);
  StartGateway(0);
  StartGateway(1);
  const std::string body = R"({"amount":"4500"})";
  std::thread doomed([&] { Post(0, "pay-4", body); });
  ASSERT_TRUE(WaitForIntents("1"));
  KillGateway(0);
  doomed.join();
  HttpResponse again = RetryPastTheLease(1, "pay-4", body);
  EXPECT_EQ(again.status, 201) << again.raw;
  EXPECT_EQ(Intents(), "2");
}

}  // namespace
}  // namespace idemgate::test
