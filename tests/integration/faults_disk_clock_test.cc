// SPDX-License-Identifier: Apache-2.0
// Through the real binary with the fault shim (tests/support/fault_shim.c) LD_PRELOAD-ed: a WAL
// fdatasync that fails or stalls, and a forward wall-clock step, never make one key execute
// upstream twice nor leave a key blocked after a request that never went upstream.
#include <stdio.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "tests/integration/gateway_fixture.h"

namespace idemgate::test {
namespace {

using Steady = std::chrono::steady_clock;
using std::chrono::milliseconds;

class FaultsDiskClockTest : public GatewayTest {
 protected:
  void SetUp() override {
    GatewayTest::SetUp();
    control_ = dir_.Path("faults");
    // Lease 6 s: the upstream call may take up to 5 s (connect 1 s + response 4 s).
    Set("idempotency", "lease", "\"6s\"");
    Set("upstream", "connect_timeout", "\"1s\"");
    Set("upstream", "response_timeout", "\"4s\"");
  }

  // Starts the gateway with the shim preloaded and reading control_.
  void StartWithShim() {
    std::string config = dir_.WriteFile("idemgate.toml", ConfigText());
    std::vector<std::string> env = {std::string("LD_PRELOAD=") + FAULT_SHIM,
                                    "IDEMGATE_FAULT_FILE=" + control_, PreloadAsanOptions()};
    ASSERT_TRUE(gateway_.Start(IDEMGATE_BIN, {"--config", config}, env)) << gateway_.error();
    port_ = gateway_.WaitForPort();
    ASSERT_NE(port_, 0) << gateway_.log();
  }

  // Replaces the shim's control file atomically (the shim sees a new inode).
  void SetFaults(const std::string& text) {
    std::string tmp = dir_.WriteFile("faults.tmp", text);
    ASSERT_EQ(rename(tmp.c_str(), control_.c_str()), 0);
  }

  HttpResponse PostWithin(std::string_view key, std::string_view body, milliseconds timeout) {
    HeaderList headers = kMerchant;
    headers.emplace_back("Idempotency-Key", std::string(key));
    TestClient client(port_);
    return client.Request("POST", "/v1/payment_intents", headers, body, timeout);
  }

  // How many requests with this body reached the upstream.
  int Executions(std::string_view body) const {
    int n = 0;
    for (const RecordedRequest& r : upstream_.received()) n += r.body == body ? 1 : 0;
    return n;
  }

  std::string control_;
};

// #7: the claim's WAL fdatasync fails once. The client gets 503 and nothing goes upstream; the
// key is not left in flight: the same request retried executes normally, also after a crash
// right after the 503.
TEST_F(FaultsDiskClockTest, FailedSyncUnderAClaimLeavesTheKeyFree) {
  StartWithShim();
  ASSERT_EQ(Post("k-warm", "{}").status, 201);
  SetFaults("sync_fail = 1\nsync_match = .log\n");
  HttpResponse failed = Post("k-1", R"({"n":1})");
  ASSERT_EQ(failed.status, 503) << failed.raw << gateway_.log();
  EXPECT_EQ(ErrorCodeOf(failed), "store_unavailable") << failed.body;
  EXPECT_EQ(Executions(R"({"n":1})"), 0);
  ASSERT_TRUE(gateway_.WaitForOutput("fdatasync failed with EIO")) << gateway_.log();

  gateway_.Kill(SIGKILL);  // a crash right after the 503: the WAL must not hold the claim
  gateway_.Wait();
  SetFaults("");  // a new process would count the file's faults again
  StartWithShim();
  HttpResponse retry = Post("k-1", R"({"n":1})");
  EXPECT_EQ(retry.status, 201) << retry.raw << gateway_.log();
  EXPECT_FALSE(retry.Header("Idempotent-Replayed").has_value());
  EXPECT_EQ(Executions(R"({"n":1})"), 1);

  // And without a restart: another key, the same fault.
  SetFaults("sync_fail = 1\nsync_match = .log\n");
  ASSERT_EQ(Post("k-2", R"({"n":2})").status, 503);
  HttpResponse again = Post("k-2", R"({"n":2})");
  EXPECT_EQ(again.status, 201) << again.raw << gateway_.log();
  EXPECT_EQ(Post("k-2", R"({"n":2})").Header("Idempotent-Replayed"), "true");
  EXPECT_EQ(Executions(R"({"n":2})"), 1);
}

// #7: the completion's WAL fdatasync fails once after the upstream executed. The gateway retries
// the completion; the client gets the upstream's answer (not 409), and retries replay it.
TEST_F(FaultsDiskClockTest, FailedSyncUnderACompletionStillAnswersTheUpstreamResult) {
  upstream_.EnqueueBehavior(UpstreamBehavior::Respond(201, R"({"id":"pi_once"})").WithDelay(300));
  StartWithShim();
  HttpResponse answer;
  std::jthread client([&] { answer = Post("k", R"({"n":1})"); });
  ASSERT_TRUE(
      upstream_.WaitForRequests(1));  // claimed and durable: the next sync is the Complete's
  SetFaults("sync_fail = 1\nsync_match = .log\n");
  client.join();
  ASSERT_TRUE(gateway_.WaitForOutput("fdatasync failed with EIO")) << gateway_.log();
  EXPECT_EQ(answer.status, 201) << answer.raw << gateway_.log();
  EXPECT_EQ(answer.body, R"({"id":"pi_once"})");
  HttpResponse retry = Post("k", R"({"n":1})");
  EXPECT_EQ(retry.Header("Idempotent-Replayed"), "true") << retry.raw;
  EXPECT_EQ(retry.body, R"({"id":"pi_once"})");
  EXPECT_EQ(Executions(R"({"n":1})"), 1);
}

// #2: the wall clock steps 10 s forward while an attempt runs (+0.5 s into a 6 s lease). A retry
// must not take it over before the attempt's own (monotonic) deadline.
TEST_F(FaultsDiskClockTest, WallClockStepDoesNotLetARetryTakeOverARunningAttempt) {
  upstream_.EnqueueBehavior(UpstreamBehavior::Respond(201, R"({"id":"pi_a"})").WithDelay(2'000));
  StartWithShim();
  HttpResponse first;
  std::jthread client([&] { first = Post("k", R"({"n":1})"); });
  ASSERT_TRUE(upstream_.WaitForRequests(1));
  SetFaults("clock_offset_s = 10\n");
  HttpResponse retry = Post("k", R"({"n":1})");
  client.join();
  EXPECT_TRUE(gateway_.WaitForOutput("clock offset 10 s")) << gateway_.log();
  EXPECT_EQ(retry.status, 409) << retry.raw;
  EXPECT_EQ(ErrorCodeOf(retry), "idempotency_key_in_use") << retry.body;
  EXPECT_EQ(first.status, 201) << first.raw;
  EXPECT_EQ(first.body, R"({"id":"pi_a"})");
  EXPECT_EQ(Executions(R"({"n":1})"), 1);
  EXPECT_EQ(Post("k", R"({"n":1})").Header("Idempotent-Replayed"), "true");
}

// True once the store's memtable holding the records so far was flushed: a table file exists and
// the write-ahead log it came from is gone (one log left).
bool FlushedToTable(const std::string& dir) {
  int tables = 0;
  int logs = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    std::string ext = e.path().extension().string();
    tables += ext == ".sst" ? 1 : 0;
    logs += ext == ".log" ? 1 : 0;
  }
  return tables > 0 && logs == 1;
}

// A claim's WAL sync stalls past store.confirm_timeout (1 s here): the client is told 503 at the
// timeout instead of waiting for the disk, nothing goes upstream, and once the sync ends the late
// claim is given back, so the same request then executes, once.
TEST_F(FaultsDiskClockTest, ClaimStalledPastTheConfirmTimeoutIs503AndTheKeyIsGivenBack) {
  Set("store", "confirm_timeout", "\"1s\"");
  StartWithShim();
  ASSERT_EQ(Post("k-warm", "{}").status, 201);
  SetFaults("sync_stall_ms = 3000\nsync_stall_count = 1\nsync_match = .log\n");
  HttpResponse stalled = Post("k-1", R"({"n":1})");  // without the timeout: a 201 after 3 s
  ASSERT_EQ(stalled.status, 503) << stalled.raw << gateway_.log();
  EXPECT_EQ(ErrorCodeOf(stalled), "store_unavailable") << stalled.body;
  EXPECT_NE(stalled.body.find("has not confirmed the claim"), std::string::npos) << stalled.body;
  ASSERT_TRUE(gateway_.WaitForOutput("fdatasync stalled")) << gateway_.log();
  EXPECT_EQ(Executions(R"({"n":1})"), 0);
  // The stall ends and the late claim is released: the key is free, not in flight.
  HttpResponse retried;
  for (int i = 0; i < 100; ++i) {
    retried = Post("k-1", R"({"n":1})");
    if (retried.status != 409 && retried.status != 503) break;
    std::this_thread::sleep_for(milliseconds(100));
  }
  EXPECT_EQ(retried.status, 201) << retried.raw << gateway_.log();
  EXPECT_EQ(Executions(R"({"n":1})"), 1);
}

// #1 (the issue's timeline, stretched): A's in-flight record is only on disk (18 MiB of
// completions around it flushed the memtable), so a retry B inside A's lease goes to the store's
// writer, which is stalled in a WAL fdatasync past A's lease. B must be decided as of its arrival
// (in flight: 409), A's completion must be stored, and the upstream must execute A once.
TEST_F(FaultsDiskClockTest, StalledSyncDoesNotTurnARetryInsideTheLeaseIntoATakeover) {
  // Lease 10 s (connect 1 s + response 8 s); A's upstream answers after 7.5 s. Between A's claim
  // and B (6 MiB through the gateway, a flush) there is time even in a TSan build.
  Set("idempotency", "lease", "\"10s\"");
  Set("upstream", "response_timeout", "\"8s\"");
  Set("limits", "max_response_body", "\"32MiB\"");
  // B waits out the stall (up to ~10 s): store.confirm_timeout must not answer it first.
  Set("store", "confirm_timeout", "\"1m\"");
  constexpr milliseconds kLease(10'000);
  constexpr milliseconds kAnswerA(7'500);
  constexpr milliseconds kSlow(60'000);  // for the big answers in a sanitizer build
  upstream_.EnqueueBehavior(UpstreamBehavior::BigBody(12 << 20));  // before A: no flush yet
  upstream_.EnqueueBehavior(
      UpstreamBehavior::Respond(201, R"({"id":"pi_a"})").WithDelay(kAnswerA.count()));
  upstream_.EnqueueBehavior(UpstreamBehavior::BigBody(6 << 20));  // after A: the memtable is full
  StartWithShim();
  ASSERT_EQ(PostWithin("k-big1", "{}", kSlow).status, 200);
  HttpResponse a;
  std::jthread client_a([&] { a = PostWithin("k-a", R"({"n":"a"})", kSlow); });
  ASSERT_TRUE(upstream_.WaitForRequests(2));
  const Steady::time_point a_claimed = Steady::now();  // A's lease ends kLease after this
  ASSERT_EQ(PostWithin("k-big2", "{}", kSlow).status, 200);
  ASSERT_EQ(Post("k-d", "{}").status, 201);  // switches the full memtable: A goes to a table
  const std::string data = dir_.Path("data");
  while (!FlushedToTable(data)) {
    ASSERT_LT(Steady::now() - a_claimed, kAnswerA) << "no flush\n" << gateway_.log();
    std::this_thread::sleep_for(milliseconds(10));
  }
  const auto flushed = Steady::now() - a_claimed;
  // The next WAL sync (C's claim) stalls until 1.5 s past A's lease.
  auto stall = a_claimed + kLease + milliseconds(1'500) - Steady::now();
  SetFaults(
      "sync_stall_ms = " + std::to_string(std::chrono::duration_cast<milliseconds>(stall).count()) +
      "\nsync_stall_count = 1\nsync_match = .log\n");
  HttpResponse c;
  std::jthread client_c([&] { c = PostWithin("k-c", R"({"n":"c"})", kSlow); });
  ASSERT_TRUE(gateway_.WaitForOutput("fdatasync stalled")) << gateway_.log();
  ASSERT_LT(Steady::now() - a_claimed, kAnswerA - milliseconds(300))
      << "too slow to send B before A's answer; flushed after "
      << std::chrono::duration_cast<milliseconds>(flushed).count() << " ms\n"
      << gateway_.log();
  HttpResponse b = PostWithin("k-a", R"({"n":"a"})", kSlow);
  client_a.join();
  client_c.join();

  EXPECT_EQ(Executions(R"({"n":"a"})"), 1) << "A executed twice";
  EXPECT_EQ(a.status, 201) << a.raw;
  EXPECT_EQ(a.body, R"({"id":"pi_a"})");
  if (b.status == 201) {  // the replay of A's answer is the other correct outcome
    EXPECT_EQ(b.Header("Idempotent-Replayed"), "true") << b.raw;
  } else {
    EXPECT_EQ(b.status, 409) << b.raw;
  }
  // C's claim took its whole lease (the stall): it may be refused, but then it never ran.
  if (c.status != 201) {
    EXPECT_EQ(Executions(R"({"n":"c"})"), 0) << c.raw;
  }
  HttpResponse later = Post("k-a", R"({"n":"a"})");
  EXPECT_EQ(later.Header("Idempotent-Replayed"), "true") << later.raw;
  EXPECT_EQ(later.body, R"({"id":"pi_a"})");
}

}  // namespace
}  // namespace idemgate::test
