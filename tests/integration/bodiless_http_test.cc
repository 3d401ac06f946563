// Through the real binary: answers that end at their blank line whatever framing they announce
// (RFC 9112 6.3: 1xx, 204, 304, and any answer to HEAD). A 304 carrying Content-Length (allowed
// by RFC 9110 8.6) once made the gateway wait for body bytes that never come: the keep-alive
// connection stalled until upstream.response_timeout, and a guarded 304 was stored as a 504.
// Also: the gateway's own answers to a passthrough request carry its X-Request-Id.
#include <gtest/gtest.h>

#include "tests/integration/gateway_fixture.h"

namespace idemgate::test {
namespace {

using namespace std::chrono_literals;

class BodilessTest : public GatewayTest {
 protected:
  void SetUp() override {
    GatewayTest::SetUp();
    // A stall would show as a 504 after this, far past the test client's 5 s wait.
    Set("upstream", "response_timeout", "\"20s\"");
    Set("idempotency", "lease", "\"60s\"");
  }
};

// Passthrough: each answer comes back at once and the connection carries the next request.
TEST_F(BodilessTest, PassthroughAnswersWithAnnouncedLengthButNoBodyDoNotStall) {
  StartGateway();
  TestClient client(port_);
  for (int status : {304, 204}) {
    upstream_.EnqueueBehavior(UpstreamBehavior::Respond(
        status, "", {{"Content-Length", "42"}, {"ETag", "\"v1\""}}));
    HttpResponse r = client.Request("GET", "/v1/payment_intents/pi_1", kMerchant, "", 3s);
    EXPECT_EQ(r.status, status) << r.raw << r.error;
    EXPECT_TRUE(r.body.empty());
    EXPECT_EQ(r.Header("ETag").value_or(""), "\"v1\"");
  }
  // A HEAD whose answer announces a chunked body and sends none.
  upstream_.EnqueueBehavior(
      UpstreamBehavior::Respond(200, "", {{"Transfer-Encoding", "chunked"}}));
  ASSERT_TRUE(client.SendRaw(TestClient::BuildRequest({"HEAD", "/v1/x", kMerchant, ""})));
  HttpResponse head = client.ReadResponse(3s, /*head_request=*/true);
  EXPECT_EQ(head.status, 200) << head.raw << head.error;
  // The connection is still in step with the upstream's.
  upstream_.EnqueueBehavior(UpstreamBehavior::Respond(200, R"({"ok":1})"));
  HttpResponse after = client.Request("GET", "/v1/payment_intents/pi_1", kMerchant, "", 3s);
  EXPECT_EQ(after.status, 200) << after.raw << after.error;
  EXPECT_EQ(after.body, R"({"ok":1})");
  EXPECT_EQ(upstream_.requests(), 4);
  EXPECT_EQ(upstream_.connections_accepted(), 1);  // the upstream connection was reused too
}

// Guarded: the 304 is stored as the upstream sent it and replayed as a 304, not a 504.
TEST_F(BodilessTest, GuardedNotModifiedIsStoredAndReplayedAsIs) {
  StartGateway();
  upstream_.SetBehavior(
      UpstreamBehavior::Respond(304, "", {{"Content-Length", "42"}, {"ETag", "\"v7\""}}));
  HttpResponse first = Post("k-304", "{}");
  EXPECT_EQ(first.status, 304) << first.raw << first.error;
  HttpResponse again = Post("k-304", "{}");
  EXPECT_EQ(again.status, 304) << again.raw << again.error;
  EXPECT_EQ(again.Header("Idempotent-Replayed").value_or(""), "true");
  EXPECT_EQ(again.Header("ETag").value_or(""), "\"v7\"");
  EXPECT_EQ(upstream_.requests(), 1);
  // The upstream connection is still in step: the next request gets its own answer.
  upstream_.SetBehavior(UpstreamBehavior::Respond(201, R"({"id":"pi_2"})"));
  HttpResponse next = Post("k-next", "{}");
  EXPECT_EQ(next.status, 201) << next.raw;
  EXPECT_EQ(next.body, R"({"id":"pi_2"})");
}

// The gateway's own answers to a passthrough request name the request, as every answer does.
TEST_F(BodilessTest, PassthroughErrorAnswersCarryTheRequestId) {
  upstream_.SetBehavior(UpstreamBehavior::Act(UpstreamAction::kMalformed));
  StartGateway();
  HeaderList headers = kMerchant;
  headers.emplace_back("X-Request-Id", "req-malformed-1");
  TestClient client(port_);
  HttpResponse failed = client.Request("GET", "/v1/x", headers);
  EXPECT_EQ(failed.status, 502) << failed.raw;
  EXPECT_EQ(ErrorCodeOf(failed), "upstream_failed");
  EXPECT_EQ(failed.Header("X-Request-Id").value_or(""), "req-malformed-1");
  upstream_.Stop();  // nothing listens there any more
  TestClient again(port_);
  HttpResponse unavailable = again.Request("GET", "/v1/x", kMerchant);
  EXPECT_EQ(unavailable.status, 502) << unavailable.raw;
  EXPECT_EQ(ErrorCodeOf(unavailable), "upstream_unavailable");
  EXPECT_EQ(unavailable.Header("X-Request-Id").value_or("").size(), 32u);  // a new id
}

}  // namespace
}  // namespace idemgate::test
