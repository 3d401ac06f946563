// SPDX-License-Identifier: Apache-2.0
// Through the real binary: the guard's answers (SPEC §1-§3, §8), passthrough, and forwarding.
#include "tests/integration/gateway_fixture.h"

namespace idemgate::test {
namespace {

bool IsJsonError(const HttpResponse& r, std::string_view code) {
  return r.Header("Content-Type") == "application/json" &&
         r.body.find("\"error\":\"" + std::string(code) + "\"") != std::string::npos &&
         r.body.find("\"detail\":\"") != std::string::npos;
}

TEST_F(GatewayTest, MissingCredentialIs401BeforeTheKeyIsLookedAt) {
  StartGateway();
  HttpResponse r = Post("", "{}", "/v1/payment_intents", {{"Idempotency-Key", "\"bad"}});
  EXPECT_EQ(r.status, 401);
  EXPECT_TRUE(IsJsonError(r, "missing_credentials")) << r.raw;
  EXPECT_EQ(r.Header("WWW-Authenticate"), "Bearer realm=\"idemgate\"");
  EXPECT_EQ(upstream_.requests(), 0);
}

TEST_F(GatewayTest, CredentialTwiceIs400) {
  StartGateway();
  HttpResponse r = Post("k1", "{}", "/v1/payment_intents",
                        {{"Authorization", "Bearer a"}, {"Authorization", "Bearer b"}});
  EXPECT_EQ(r.status, 400);
  EXPECT_TRUE(IsJsonError(r, "bad_request")) << r.raw;
  EXPECT_EQ(upstream_.requests(), 0);
}

TEST_F(GatewayTest, InvalidKeysAre400AndLeaveNoRecord) {
  StartGateway();
  for (std::string key :
       {std::string("\"abc"), std::string(256, 'k'), std::string("caf\xc3\xa9"), std::string("a b")}) {
    HttpResponse r = Post(key, "{}");
    EXPECT_EQ(r.status, 400) << key;
    EXPECT_TRUE(IsJsonError(r, "idempotency_key_invalid")) << r.raw;
  }
  // A control byte is refused earlier, as malformed HTTP (framing comes first, G2).
  HttpResponse control = Post(std::string("a\x01") + "b", "{}");
  EXPECT_EQ(control.status, 400);
  EXPECT_TRUE(IsJsonError(control, "bad_request")) << control.raw;
  HeaderList twice = kMerchant;
  twice.emplace_back("Idempotency-Key", "k-a");
  HttpResponse r = Post("k-b", "{}", "/v1/payment_intents", twice);
  EXPECT_TRUE(IsJsonError(r, "idempotency_key_invalid")) << r.raw;
  EXPECT_EQ(upstream_.requests(), 0);
  // A 255-character key is fine.
  EXPECT_EQ(Post(std::string(255, 'k'), "{}").status, 201);
}

TEST_F(GatewayTest, RequireKeyPathWithoutKeyIs400) {
  Set("idempotency", "require_key", "[\"/v1/payment_intents\"]");
  StartGateway();
  HttpResponse r = Post("", "{}");
  EXPECT_EQ(r.status, 400);
  EXPECT_TRUE(IsJsonError(r, "idempotency_key_missing")) << r.raw;
  // Other paths pass through without a key.
  EXPECT_EQ(Post("", "{}", "/v1/refunds").status, 201);
  EXPECT_EQ(upstream_.requests(), 1);
}

TEST_F(GatewayTest, PassthroughIsUntouchedAndNeverStored) {
  StartGateway();
  TestClient client(port_);
  // A GET with a key is not guarded: both execute.
  HeaderList with_key = {{"Idempotency-Key", "k-get"}};
  EXPECT_EQ(client.Request("GET", "/v1/payment_intents/pi_1", with_key).status, 201);
  HttpResponse second = client.Request("GET", "/v1/payment_intents/pi_1", with_key);
  EXPECT_FALSE(second.Header("Idempotent-Replayed").has_value());
  // A keyless POST, even without a credential, executes each time.
  EXPECT_EQ(Post("", "{}", "/v1/payment_intents", {}).status, 201);
  EXPECT_EQ(Post("", "{}", "/v1/payment_intents", {}).status, 201);
  EXPECT_EQ(upstream_.requests(), 4);
}

// A HEAD passes through with the upstream's Content-Length (the size of the body it would get)
// and no body, and the connection carries on.
TEST_F(GatewayTest, PassthroughHeadKeepsTheUpstreamLength) {
  upstream_.EnqueueBehavior(UpstreamBehavior::Respond(200, "", {{"Content-Length", "318"}}));
  StartGateway();
  TestClient client(port_);
  HttpResponse head = client.Request("HEAD", "/v1/payment_intents/pi_1", kMerchant);
  EXPECT_EQ(head.status, 200) << head.raw;
  EXPECT_EQ(head.Header("Content-Length"), "318") << head.raw;
  EXPECT_EQ(head.HeaderCount("Content-Length"), 1) << head.raw;
  EXPECT_EQ(head.body, "");
  EXPECT_EQ(upstream_.last_request()->method, "HEAD");
  EXPECT_EQ(client.Request("GET", "/v1/payment_intents/pi_1", kMerchant).status, 201);
}

TEST_F(GatewayTest, ForwardsHostKeyAndForwardedHeadersWithoutHopByHop) {
  StartGateway();
  TestClient client(port_);
  HttpResponse r = client.Request("POST", "/v1/payment_intents?x=1",
                                  {{"Host", "pay.example"},
                                   {"Authorization", "Bearer m"},
                                   {"Idempotency-Key", "\"k-fwd\""},
                                   {"Connection", "keep-alive, X-Hop"},
                                   {"X-Hop", "secret"},
                                   {"X-End", "kept"}},
                                  "{}");
  ASSERT_EQ(r.status, 201);
  RecordedRequest seen = *upstream_.last_request();
  EXPECT_EQ(seen.target, "/v1/payment_intents?x=1");
  EXPECT_EQ(seen.Header("Host"), "pay.example");
  EXPECT_EQ(seen.Header("Idempotency-Key"), "\"k-fwd\"");  // forwarded as sent (G3)
  EXPECT_EQ(seen.Header("Authorization"), "Bearer m");
  EXPECT_EQ(seen.Header("X-Forwarded-For"), "127.0.0.1");
  EXPECT_EQ(seen.Header("X-Forwarded-Proto"), "http");
  EXPECT_EQ(seen.Header("X-End"), "kept");
  EXPECT_FALSE(seen.Header("X-Hop").has_value());
  EXPECT_EQ(seen.body, "{}");
}

TEST_F(GatewayTest, PipelinedRequestsAreAnsweredInOrder) {
  upstream_.EnqueueBehavior(UpstreamBehavior::Respond(201, "one").WithDelay(200));
  upstream_.EnqueueBehavior(UpstreamBehavior::Respond(201, "two"));
  upstream_.EnqueueBehavior(UpstreamBehavior::Respond(201, "three"));
  StartGateway();
  TestClient client(port_);
  std::string bytes;
  for (const char* key : {"p1", "p2", "p3"}) {
    RequestSpec spec{"POST", "/v1/payment_intents", kMerchant, "{}"};
    spec.headers.emplace_back("Idempotency-Key", key);
    bytes += TestClient::BuildRequest(spec);
  }
  ASSERT_TRUE(client.SendRaw(bytes));
  EXPECT_EQ(client.ReadResponse().body, "one");
  EXPECT_EQ(client.ReadResponse().body, "two");
  EXPECT_EQ(client.ReadResponse().body, "three");
}

TEST_F(GatewayTest, ExpectContinueGets100ThenTheAnswer) {
  StartGateway();
  TestClient client(port_);
  ASSERT_TRUE(client.SendRaw(
      "POST /v1/payment_intents HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer m\r\n"
      "Idempotency-Key: k-100\r\nContent-Length: 2\r\nExpect: 100-continue\r\n\r\n"));
  HttpResponse interim = client.ReadResponse();
  EXPECT_EQ(interim.status, 100) << interim.raw;
  ASSERT_TRUE(client.SendRaw("{}"));
  HttpResponse final_answer = client.ReadResponse();
  EXPECT_EQ(final_answer.status, 201);
  EXPECT_EQ(upstream_.last_request()->body, "{}");
  EXPECT_FALSE(upstream_.last_request()->Header("Expect").has_value());
}

TEST_F(GatewayTest, SigtermFinishesInFlightExchangeAndExitsZero) {
  upstream_.SetBehavior(UpstreamBehavior::Respond(201, "finished").WithDelay(500));
  StartGateway();
  HttpResponse answer;
  std::thread client([&] { answer = Post("k-term", "{}"); });
  ASSERT_TRUE(upstream_.WaitForRequests(1));
  gateway_.Kill(SIGTERM);
  client.join();
  EXPECT_EQ(answer.status, 201);
  EXPECT_EQ(answer.body, "finished");
  std::optional<ExitStatus> status = gateway_.Wait();
  ASSERT_TRUE(status.has_value());
  EXPECT_TRUE(status->exited() && status->code() == 0) << status->ToString() << gateway_.log();
  // The completion was made durable before the answer: a restart replays it.
  StartGateway();
  EXPECT_EQ(Post("k-term", "{}").Header("Idempotent-Replayed"), "true");
  EXPECT_EQ(upstream_.requests(), 1);
}

}  // namespace
}  // namespace idemgate::test
