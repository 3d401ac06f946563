// Through the real binary: the README transcript (README "What a client sees") and every claim
// outcome of SPEC §5.
#include <set>

#include "tests/integration/gateway_fixture.h"

namespace idemgate::test {
namespace {

using namespace std::chrono_literals;

class DemoTranscriptTest : public GatewayTest {
 protected:
  void SetUp() override {
    GatewayTest::SetUp();
    DemoApi::Options options;
    options.delay_ms = delay_ms_;
    ASSERT_TRUE(demo_.Start(options));
    Set("upstream", "url", "\"http://127.0.0.1:" + std::to_string(demo_.port()) + "\"");
    StartGateway();
  }
  int delay_ms_ = 0;
  DemoApi demo_;
};

TEST_F(DemoTranscriptTest, Spec10CreateReplayAndReuse) {
  const std::string body = R"({"amount":"100000000"})";
  HttpResponse first = Post("order-1001", body);
  ASSERT_EQ(first.status, 201) << first.raw;
  EXPECT_TRUE(first.Header("Location").has_value());
  EXPECT_FALSE(first.Header("Idempotent-Replayed").has_value());
  EXPECT_NE(first.body.find("\"state\":\"created\""), std::string::npos);

  HttpResponse again = Post("order-1001", body);
  ASSERT_EQ(again.status, 201);
  EXPECT_EQ(again.Header("Idempotent-Replayed"), "true");
  EXPECT_EQ(again.body, first.body);
  EXPECT_EQ(WithoutReplayedHeader(again.raw), WithoutRequestId(first.raw));  // byte for byte

  const std::string other = R"({"amount":"999000000"})";
  HttpResponse reused = Post("order-1001", other);
  ASSERT_EQ(reused.status, 422);
  EXPECT_EQ(reused.Header("Content-Type"), "application/json");
  std::string expected =
      R"({"error":"idempotency_key_reused","detail":"Idempotency-Key \"order-1001\" was already)"
      R"( used for a different request (fingerprint )" +
      ExpectedFingerprintPrefix("POST", "/v1/payment_intents", body) + ", got " +
      ExpectedFingerprintPrefix("POST", "/v1/payment_intents", other) + ")\"}";
  EXPECT_EQ(reused.body, expected);
  EXPECT_EQ(demo_.executions(), 1);
}

class SlowDemoTest : public DemoTranscriptTest {
 protected:
  void SetUp() override {
    delay_ms_ = 300;
    DemoTranscriptTest::SetUp();
  }
};

TEST_F(SlowDemoTest, FiftyConcurrentRetriesExecuteOnce) {
  RequestSpec spec;
  spec.method = "POST";
  spec.target = "/v1/payment_intents";
  spec.headers = kMerchant;
  spec.headers.emplace_back("Idempotency-Key", "order-concurrent");
  spec.body = R"({"amount":"5000"})";
  std::vector<HttpResponse> answers = SendConcurrently(port_, 50, spec);
  int created = 0, in_use = 0;
  std::set<std::string> bodies;
  for (const HttpResponse& r : answers) {
    ASSERT_TRUE(r.status == 201 || r.status == 409) << r.raw;
    if (r.status == 201) {
      ++created;
      bodies.insert(r.body);
    } else {
      ++in_use;
      EXPECT_NE(r.body.find("idempotency_key_in_use"), std::string::npos);
      EXPECT_TRUE(r.Header("Retry-After").has_value());
    }
  }
  EXPECT_GE(created, 1);
  EXPECT_GE(in_use, 1);
  EXPECT_EQ(bodies.size(), 1u);
  EXPECT_EQ(demo_.executions(), 1);
  // After it completed, every retry is the replay of that one body.
  HttpResponse later = TestClient(port_).Request(spec);
  EXPECT_EQ(later.status, 201);
  EXPECT_EQ(later.body, *bodies.begin());
  EXPECT_EQ(demo_.executions(), 1);
}

TEST_F(GatewayTest, InFlightAnswers409WithRetryAfter) {
  upstream_.SetBehavior(UpstreamBehavior::Respond(201, "done").WithDelay(1500));
  StartGateway();
  std::thread first([&] { EXPECT_EQ(Post("k-inflight", "{}").status, 201); });
  ASSERT_TRUE(upstream_.WaitForRequests(1));
  HttpResponse second = Post("k-inflight", "{}");
  EXPECT_EQ(second.status, 409);
  int retry_after = std::stoi(second.Header("Retry-After").value_or("0"));
  EXPECT_GE(retry_after, 1);
  EXPECT_LE(retry_after, 30);  // seconds left on the default 30 s lease
  EXPECT_NE(second.body.find("\"error\":\"idempotency_key_in_use\""), std::string::npos);
  first.join();
  EXPECT_EQ(upstream_.requests(), 1);
}

TEST_F(GatewayTest, EveryStatusIsStoredAndReplayed) {
  upstream_.SetBehavior(UpstreamBehavior::Respond(500, "boom", {{"X-Trace", "t1"}}));
  StartGateway();
  HttpResponse first = Post("k-500", "{}");
  ASSERT_EQ(first.status, 500);
  upstream_.SetBehavior(UpstreamBehavior::Respond(201, "would be a second execution"));
  HttpResponse replay = Post("k-500", "{}");
  EXPECT_EQ(replay.status, 500);
  EXPECT_EQ(replay.body, "boom");
  EXPECT_EQ(replay.Header("X-Trace"), "t1");
  EXPECT_EQ(replay.Header("Idempotent-Replayed"), "true");
  EXPECT_EQ(upstream_.requests(), 1);
}

TEST_F(GatewayTest, TakeoverAfterCrashWhileInFlight) {
  Set("upstream", "connect_timeout", "\"100ms\"");
  Set("upstream", "response_timeout", "\"500ms\"");
  Set("idempotency", "lease", "\"1s\"");
  upstream_.EnqueueBehavior(UpstreamBehavior::Act(UpstreamAction::kHang));
  StartGateway();
  std::thread doomed([&] { Post("k-crash", "{}"); });  // its gateway dies under it
  ASSERT_TRUE(upstream_.WaitForRequests(1));
  RestartGateway();
  doomed.join();
  // Inside the lease the dead attempt still owns the key.
  HttpResponse early = Post("k-crash", "{}");
  EXPECT_EQ(early.status, 409) << early.raw;
  // After the lease the retry takes over and executes (attempt 2).
  HttpResponse later;
  auto deadline = std::chrono::steady_clock::now() + 10s;
  do {
    later = Post("k-crash", "{}");
  } while (later.status == 409 && std::chrono::steady_clock::now() < deadline);
  EXPECT_EQ(later.status, 201) << later.raw;
  EXPECT_EQ(upstream_.requests(), 2);
  EXPECT_EQ(Post("k-crash", "{}").Header("Idempotent-Replayed"), "true");
}

// C5: with takeover off, the attempt lost with the crash is never executed again: the retry
// after the lease gets a stored 502 upstream_failed, and so does every retry after it.
TEST_F(GatewayTest, TakeoverOffAnswersALostAttemptWith502AndNeverReexecutes) {
  Set("upstream", "connect_timeout", "\"100ms\"");
  Set("upstream", "response_timeout", "\"500ms\"");
  Set("idempotency", "lease", "\"1s\"");
  Set("idempotency", "takeover", "false");
  upstream_.EnqueueBehavior(UpstreamBehavior::Act(UpstreamAction::kHang));
  StartGateway();
  std::thread doomed([&] { Post("k-lost", "{}"); });
  ASSERT_TRUE(upstream_.WaitForRequests(1));
  RestartGateway();
  doomed.join();
  HttpResponse later;
  auto deadline = std::chrono::steady_clock::now() + 10s;
  do {
    later = Post("k-lost", "{}");
  } while (later.status == 409 && std::chrono::steady_clock::now() < deadline);
  EXPECT_EQ(later.status, 502) << later.raw;
  EXPECT_EQ(ErrorCodeOf(later), "upstream_failed");
  EXPECT_NE(later.body.find("outcome is unknown"), std::string::npos);
  EXPECT_EQ(Post("k-lost", "{}").Header("Idempotent-Replayed"), "true");
  EXPECT_EQ(upstream_.requests(), 1);
}

TEST_F(GatewayTest, CompletedRecordSurvivesKill9) {
  StartGateway();
  HttpResponse first = Post("k-durable", R"({"amount":"7"})");
  ASSERT_EQ(first.status, 201);
  RestartGateway();
  HttpResponse replay = Post("k-durable", R"({"amount":"7"})");
  EXPECT_EQ(replay.status, 201);
  EXPECT_EQ(WithoutReplayedHeader(replay.raw), WithoutRequestId(first.raw));
  EXPECT_EQ(upstream_.requests(), 1);
}

TEST_F(GatewayTest, ScopesAreIsolated) {
  StartGateway();
  upstream_.EnqueueBehavior(UpstreamBehavior::Respond(201, "for merchant A"));
  upstream_.EnqueueBehavior(UpstreamBehavior::Respond(201, "for merchant B"));
  HttpResponse a = Post("order-1", "{}", "/v1/payment_intents", {{"Authorization", "Bearer A"}});
  HttpResponse b = Post("order-1", "{}", "/v1/payment_intents", {{"Authorization", "Bearer B"}});
  EXPECT_EQ(a.body, "for merchant A");
  EXPECT_EQ(b.body, "for merchant B");
  EXPECT_EQ(upstream_.requests(), 2);
  // The scheme is case-insensitive, the credential exact.
  HttpResponse a2 = Post("order-1", "{}", "/v1/payment_intents", {{"Authorization", "bearer A"}});
  EXPECT_EQ(a2.body, "for merchant A");
  EXPECT_EQ(a2.Header("Idempotent-Replayed"), "true");
}

TEST_F(GatewayTest, QuotedAndBareKeysAreTheSameKey) {
  StartGateway();
  ASSERT_EQ(Post("\"order-q\"", "{}").status, 201);
  HttpResponse bare = Post("order-q", "{}");
  EXPECT_EQ(bare.Header("Idempotent-Replayed"), "true");
  EXPECT_EQ(upstream_.requests(), 1);
}

TEST_F(GatewayTest, ChunkedAndContentLengthBodiesFingerprintTheSame) {
  StartGateway();
  TestClient client(port_);
  ASSERT_TRUE(client.SendRaw(
      "POST /v1/payment_intents HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer m\r\n"
      "Idempotency-Key: k-chunk\r\nTransfer-Encoding: chunked\r\n\r\n"
      "5\r\n{\"a\":\r\n3\r\n12}\r\n0\r\n\r\n"));
  HttpResponse chunked = client.ReadResponse();
  ASSERT_EQ(chunked.status, 201) << chunked.raw;
  EXPECT_EQ(upstream_.last_request()->body, "{\"a\":12}");
  HttpResponse plain = Post("k-chunk", "{\"a\":12}", "/v1/payment_intents",
                            {{"Authorization", "Bearer m"}});
  EXPECT_EQ(plain.status, 201);
  EXPECT_EQ(plain.Header("Idempotent-Replayed"), "true");
  EXPECT_EQ(upstream_.requests(), 1);
}

}  // namespace
}  // namespace idemgate::test
