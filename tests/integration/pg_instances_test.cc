// SPDX-License-Identifier: Apache-2.0
// SPEC §11 M1/M2: two gateway processes on one PostgreSQL share one set of records.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <memory>
#include <string>
#include <vector>

#include "tests/integration/pg_fixture.h"

namespace idemgate::test {
namespace {

using namespace std::chrono_literals;

TEST_F(PgGatewaysTest, FiftySameKeyRequestsOverTwoInstancesExecuteOnce) {
  upstream_.SetBehavior(
      UpstreamBehavior::Respond(201, R"({"id":"pi_once"})", {{"Content-Type", "application/json"}})
          .WithDelay(300));
  StartGateway(0);
  StartGateway(1);
  std::vector<HttpResponse> answers = PostConcurrently(50, "k-race", R"({"amount":"5"})");
  EXPECT_EQ(upstream_.requests(), 1);
  int first = 0, replays = 0, in_use = 0;
  for (const HttpResponse& r : answers) {
    if (r.status == 201 && !r.Header("Idempotent-Replayed")) {
      ++first;
    } else if (r.status == 201 && r.Header("Idempotent-Replayed") == "true") {
      ++replays;
      EXPECT_EQ(r.body, R"({"id":"pi_once"})");
    } else if (r.status == 409 && ErrorCodeOf(r) == "idempotency_key_in_use") {
      ++in_use;
    } else {
      ADD_FAILURE() << "unexpected answer: " << r.raw << r.error;
    }
  }
  EXPECT_EQ(first, 1);
  EXPECT_EQ(first + replays + in_use, 50);
}

TEST_F(PgGatewaysTest, ReplayAndMismatchFromTheInstanceThatDidNotExecute) {
  StartGateway(0);
  StartGateway(1);
  HttpResponse made = Post(0, "order-1001", R"({"amount":"5"})");
  ASSERT_EQ(made.status, 201) << made.raw;
  HttpResponse replay = Post(1, "order-1001", R"({"amount":"5"})");
  EXPECT_EQ(replay.status, 201);
  EXPECT_EQ(replay.Header("Idempotent-Replayed"), "true");
  EXPECT_EQ(FirstAnswerBytes(replay.raw), WithoutRequestId(made.raw));  // byte for byte
  HttpResponse reused = Post(1, "order-1001", R"({"amount":"999"})");
  EXPECT_EQ(reused.status, 422);
  EXPECT_EQ(ErrorCodeOf(reused), "idempotency_key_reused");
  EXPECT_NE(
      reused.body.find("fingerprint " + ExpectedFingerprintPrefix("POST", "/v1/payment_intents",
                                                                  R"({"amount":"5"})")),
      std::string::npos)
      << reused.body;
  EXPECT_EQ(upstream_.requests(), 1);
}

// kill -9 of the instance running an attempt: the other instance answers 409 while the lease
// lives, then takes over (attempt 2) and executes; afterwards both replay that answer.
TEST_F(PgGatewaysTest, OtherInstanceTakesOverAfterTheLeaseOfAKilledOne) {
  Set("upstream", "connect_timeout", "\"100ms\"");
  Set("upstream", "response_timeout", "\"500ms\"");
  Set("idempotency", "lease", "\"1s\"");
  upstream_.EnqueueBehavior(UpstreamBehavior::Act(UpstreamAction::kHang));
  StartGateway(0);
  StartGateway(1);
  std::thread doomed([&] { Post(0, "k-crash", "{}"); });  // its gateway dies under it
  ASSERT_TRUE(upstream_.WaitForRequests(1));
  gateways_[0]->Kill(SIGKILL);
  gateways_[0]->Wait();
  doomed.join();
  HttpResponse early = Post(1, "k-crash", "{}");
  EXPECT_EQ(early.status, 409) << early.raw;
  HttpResponse later;
  auto deadline = std::chrono::steady_clock::now() + 10s;
  do {
    later = Post(1, "k-crash", "{}");
  } while (later.status == 409 && std::chrono::steady_clock::now() < deadline);
  EXPECT_EQ(later.status, 201) << later.raw;
  EXPECT_EQ(upstream_.requests(), 2);
  StartGateway(0);
  EXPECT_EQ(Post(0, "k-crash", "{}").Header("Idempotent-Replayed"), "true");
}

// SPEC R3b/M4: while the database is down guarded requests get 503 and nothing goes upstream;
// once it is back the same gateway (not restarted) serves again, and nothing ran twice.
TEST_F(PgGatewaysTest, DatabaseDownGives503ThenRecoversWithoutRestart) {
  StartGateway(0);
  HttpResponse before = Post(0, "k-before", "{}");
  ASSERT_EQ(before.status, 201);
  ASSERT_TRUE(pg_.Stop(0));
  HttpResponse down;
  auto deadline = std::chrono::steady_clock::now() + 10s;
  do {
    down = Post(0, "k-down", "{}");
  } while (down.status != 503 && std::chrono::steady_clock::now() < deadline);
  EXPECT_EQ(down.status, 503) << down.raw;
  EXPECT_EQ(ErrorCodeOf(down), "store_unavailable");
  EXPECT_EQ(upstream_.requests(), 1);
  std::string error;
  ASSERT_TRUE(pg_.Start(0, &error)) << error;
  HttpResponse up;
  deadline = std::chrono::steady_clock::now() + 10s;
  do {
    up = Post(0, "k-down", "{}");
  } while (up.status == 503 && std::chrono::steady_clock::now() < deadline);
  EXPECT_EQ(up.status, 201) << up.raw;
  EXPECT_EQ(Post(0, "k-before", "{}").Header("Idempotent-Replayed"), "true");
  EXPECT_EQ(upstream_.requests(), 2);
  EXPECT_TRUE(gateways_[0]->running());
}

// The admin record API of one instance sees and deletes what another stored; /readyz follows
// the database (503 while it is down, 200 once back, without a restart).
TEST_F(PgGatewaysTest, AdminApiAndReadinessFollowTheSharedDatabase) {
  Set("admin", "address", "\"127.0.0.1:0\"");
  Set("admin", "token", "\"tok\"");
  StartGateway(0);
  StartGateway(1);
  uint16_t admin1 = gateways_[1]->WaitForPort("admin listening on ");
  ASSERT_NE(admin1, 0) << gateways_[1]->log();
  auto admin = [&](std::string_view method, std::string_view target) {
    TestClient client(admin1);
    return client.Request(
        method, target,
        {{"Authorization", "Bearer tok"}, {"X-Idemgate-Credential", "Bearer merchant-demo"}});
  };
  ASSERT_EQ(Post(0, "r-shared", "{}").status, 201);
  // A replay through instance 0 first: had it cached the record, the delete made through
  // instance 1 could not reach that cache.
  ASSERT_EQ(Post(0, "r-shared", "{}").Header("Idempotent-Replayed"), "true");
  HttpResponse found = admin("GET", "/records?key=r-shared");
  EXPECT_EQ(found.status, 200) << found.raw;
  EXPECT_NE(found.body.find("\"state\":\"completed\""), std::string::npos) << found.body;
  HttpResponse deleted = admin("DELETE", "/records?key=r-shared");
  EXPECT_EQ(deleted.status, 200) << deleted.raw;
  HttpResponse again = Post(0, "r-shared", "{}");
  EXPECT_EQ(again.status, 201);
  EXPECT_FALSE(again.Header("Idempotent-Replayed"));  // the delete reached the other instance
  EXPECT_EQ(upstream_.requests(), 2);

  auto ready = [&] { return admin("GET", "/readyz").status; };
  EXPECT_EQ(ready(), 200);
  ASSERT_TRUE(pg_.Stop(0));
  auto deadline = std::chrono::steady_clock::now() + 10s;
  while (ready() != 503 && std::chrono::steady_clock::now() < deadline) {
  }
  EXPECT_EQ(ready(), 503);
  std::string error;
  ASSERT_TRUE(pg_.Start(0, &error)) << error;
  deadline = std::chrono::steady_clock::now() + 10s;
  while (ready() != 200 && std::chrono::steady_clock::now() < deadline) {
  }
  EXPECT_EQ(ready(), 200);
}

// The environment that runs a gateway with its wall clock `seconds` off.
std::vector<std::string> ClockShifted(int seconds) {
  return {std::string("LD_PRELOAD=") + CLOCK_SHIFT_LIB,
          "IDEMGATE_CLOCK_SHIFT_S=" + std::to_string(seconds), PreloadAsanOptions()};
}

// SPEC M2: leases are decided on the database's clock. An instance 10 minutes ahead does not
// take over a live attempt (its own clock says the lease ended long ago), and one 10 minutes
// behind takes over a dead instance's attempt once the lease ends (not 10 minutes later).
TEST_F(PgGatewaysTest, InstancesWhoseClocksDisagreeStillAgreeOnLeases) {
  // The shim really moves a process's wall clock.
  std::string cmd = PreloadAsanOptions() + " LD_PRELOAD=" + std::string(CLOCK_SHIFT_LIB) +
                    " IDEMGATE_CLOCK_SHIFT_S=600 date +%s";
  FILE* date = popen(cmd.c_str(), "r");
  ASSERT_NE(date, nullptr);
  long shifted = 0;
  ASSERT_EQ(fscanf(date, "%ld", &shifted), 1);
  pclose(date);
  EXPECT_GE(shifted - time(nullptr), 590);

  Set("upstream", "connect_timeout", "\"100ms\"");
  Set("upstream", "response_timeout", "\"1s\"");
  Set("idempotency", "lease", "\"2s\"");
  upstream_.EnqueueBehavior(UpstreamBehavior::Respond(201, "slow").WithDelay(800));
  upstream_.EnqueueBehavior(UpstreamBehavior::Act(UpstreamAction::kHang));
  StartGateway(0);
  StartGateway(1, "", ClockShifted(600));
  StartGateway(2, "", ClockShifted(-600));

  HttpResponse first;
  std::thread owner([&] { first = Post(0, "k-skew", "{}"); });
  ASSERT_TRUE(upstream_.WaitForRequests(1));
  HttpResponse ahead = Post(1, "k-skew", "{}");
  EXPECT_EQ(ahead.status, 409) << ahead.raw;  // not a takeover
  owner.join();
  EXPECT_EQ(first.status, 201);
  EXPECT_EQ(Post(1, "k-skew", "{}").Header("Idempotent-Replayed"), "true");
  EXPECT_EQ(upstream_.requests(), 1);

  std::thread doomed([&] { Post(0, "k-dead", "{}"); });
  ASSERT_TRUE(upstream_.WaitForRequests(2));
  gateways_[0]->Kill(SIGKILL);
  gateways_[0]->Wait();
  doomed.join();
  auto start = std::chrono::steady_clock::now();
  HttpResponse later;
  do {
    later = Post(2, "k-dead", "{}");
  } while (later.status == 409 && std::chrono::steady_clock::now() - start < 20s);
  EXPECT_EQ(later.status, 201) << later.raw;  // taken over within the lease, not 10 min later
  EXPECT_EQ(upstream_.requests(), 3);
}

// Instances that disagree on the scope secret would give one key two scope ids, and execute it
// twice: the deployment signature in the database refuses the second instance's start.
TEST_F(PgGatewaysTest, AnInstanceWithAnotherScopeSecretIsRefused) {
  Set("scope", "secret_file", "\"" + dir_.WriteFile("a.secret", "secret-of-the-fleet") + "\"");
  StartGateway(0);
  Set("scope", "secret_file", "\"" + dir_.WriteFile("b.secret", "a-different-secret") + "\"");
  Set("store.postgres", "dsn", "\"" + pg_.Dsn(0) + "\"");
  std::string text;
  for (const auto& [section, keys] : sections_) {
    text += "[" + section + "]\n";
    for (const auto& [key, literal] : keys) text += key + " = " + literal + "\n";
  }
  GatewayProcess other;
  ASSERT_TRUE(other.Start(IDEMGATE_BIN, {"--config", dir_.WriteFile("b.toml", text)}));
  std::optional<ExitStatus> status = other.Wait();
  ASSERT_TRUE(status && status->exited() && status->code() == 1) << other.log();
  EXPECT_NE(other.log().find("scope.secret_file"), std::string::npos) << other.log();
  EXPECT_EQ(Post(0, "k-one", "{}").status, 201);  // the first instance is unaffected
}

// A fleet rolled out at once on a new database: every instance creates the schema (and the
// first to get there builds the key_hash index CONCURRENTLY, which waits for the others' schema
// transactions while they wait for its lock: PostgreSQL aborts one as a deadlock). Every
// instance must start, every time.
TEST_F(PgGatewaysTest, InstancesStartingTogetherOnANewDatabaseAllStart) {
  Set("store.postgres", "dsn", "\"" + pg_.Dsn(0) + "\"");
  for (int trial = 0; trial < 4; ++trial) {
    std::string error;
    ASSERT_TRUE(pg_.Exec(0, "DROP SCHEMA public CASCADE; CREATE SCHEMA public", nullptr, &error))
        << error;
    std::vector<std::unique_ptr<GatewayProcess>> fleet;
    for (int i = 0; i < 3; ++i) {
      Set("store", "path", "\"" + dir_.Path("fleet" + std::to_string(i)) + "\"");
      std::string text;
      for (const auto& [section, keys] : sections_) {
        text += "[" + section + "]\n";
        for (const auto& [key, literal] : keys) text += key + " = " + literal + "\n";
      }
      fleet.push_back(std::make_unique<GatewayProcess>());
      const std::string path = dir_.WriteFile("fleet" + std::to_string(i) + ".toml", text);
      ASSERT_TRUE(fleet.back()->Start(IDEMGATE_BIN, {"--config", path})) << fleet.back()->error();
    }
    for (auto& gateway : fleet) {
      const int port = gateway->WaitForPort();
      ASSERT_NE(port, 0) << "trial " << trial << ": " << gateway->log();
      HeaderList headers = kMerchant;
      headers.emplace_back("Idempotency-Key", "fleet-" + std::to_string(trial));
      EXPECT_EQ(TestClient(port).Request("POST", "/v1/payment_intents", headers, "{}").status,
                201)
          << gateway->log();
    }
  }
}

}  // namespace
}  // namespace idemgate::test
