// Through the real binary: a route's policy cannot be escaped by how a request spells its path or
// its host, and one key sent under two host routes never gets the other backend's answer.
// Each case was answered 201 and executed upstream unguarded (or replayed across backends)
// before route selection read every spelling.
#include <gtest/gtest.h>

#include "tests/integration/gateway_fixture.h"

namespace idemgate::test {
namespace {

class RoutesSpellingTest : public GatewayTest {
 protected:
  void StartWithRoutes(const std::string& routes) {
    std::string path = dir_.WriteFile("idemgate.toml", ConfigText() + routes);
    ASSERT_TRUE(gateway_.Start(IDEMGATE_BIN, {"--config", path})) << gateway_.error();
    port_ = gateway_.WaitForPort();
    ASSERT_NE(port_, 0) << gateway_.log();
  }

  HttpResponse Send(const std::string& target, HeaderList headers = kMerchant,
                    const std::string& key = "") {
    if (!key.empty()) headers.emplace_back("Idempotency-Key", key);
    TestClient client(port_);
    return client.Request("POST", target, headers, "{}");
  }

  static HeaderList WithHost(const std::string& host) {
    HeaderList headers = kMerchant;
    headers.emplace_back("Host", host);
    return headers;
  }
};

constexpr char kPaymentsRequireKey[] = R"([[routes]]
prefix = "/v1/payments"
idempotency = { require_key = ["/"] }
)";

// A keyless POST whose path reads as /v1/payments/... to a router that keeps %2F inside a
// segment, and as /z to one that decodes it: refused, never executed.
TEST_F(RoutesSpellingTest, EncodedSeparatorsDoNotLeaveARoute) {
  StartWithRoutes(kPaymentsRequireKey);
  for (const char* target : {
           "/v1/payments/a%2F..%2F..%2F..%2Fz",
           "/v1/payments/a/%252e%252e/%252e%252e/%252e%252e/z",  // double-encoded dots
           "/v1/payments/a/..%5C..%5C..%5Cz",                    // backslashes as separators
           "/v1/payments/a/..;/..;/..;/z",                       // Tomcat's "..;"
           "/v1/x/../payments",                                  // dot segments as sent
       }) {
    HttpResponse r = Send(target);
    EXPECT_EQ(r.status, 400) << target << "\n" << r.raw;
    EXPECT_EQ(ErrorCodeOf(r), "bad_request") << target;
  }
  // The same spellings with a key are refused too: no route could be chosen for them.
  EXPECT_EQ(Send("/v1/payments/a%2F..%2F..%2F..%2Fz", kMerchant, "k1").status, 400);
  EXPECT_EQ(upstream_.requests(), 0);
  // A spelling that stays under the route is served under its policy.
  HttpResponse missing = Send("/v1/payments/pi%2F1;v=2");
  EXPECT_EQ(ErrorCodeOf(missing), "idempotency_key_missing") << missing.raw;
  EXPECT_EQ(Send("/v1/payments/pi%2F1", kMerchant, "k2").status, 201);
  EXPECT_EQ(upstream_.requests(), 1);
}

constexpr char kPayHostRequiresKey[] = R"([[routes]]
prefix = "/"
host = "pay.example"
idempotency = { require_key = ["/"] }
)";

// RFC 9112 3.2.2: the host of an absolute-form target is the one the upstream acts on. A Host
// header that names another host is refused; the target's host selects the route.
TEST_F(RoutesSpellingTest, AbsoluteFormTargetRoutesByItsHost) {
  StartWithRoutes(kPayHostRequiresKey);
  HttpResponse disagree = Send("http://pay.example/charge", WithHost("other.example"));
  EXPECT_EQ(disagree.status, 400) << disagree.raw;
  EXPECT_EQ(ErrorCodeOf(disagree), "bad_request");
  EXPECT_NE(disagree.body.find("pay.example"), std::string::npos) << disagree.body;
  HttpResponse agree = Send("http://PAY.example:8080/charge", WithHost("pay.example"));
  EXPECT_EQ(ErrorCodeOf(agree), "idempotency_key_missing") << agree.raw;
  EXPECT_EQ(upstream_.requests(), 0);
  // Host given twice: routed by one, acted on by the other, so refused.
  HeaderList twice = WithHost("other.example");
  twice.emplace_back("Host", "pay.example");
  EXPECT_EQ(ErrorCodeOf(Send("/charge", twice)), "bad_request");
  EXPECT_EQ(Send("http://other.example/charge", WithHost("other.example")).status, 201);
  EXPECT_EQ(upstream_.requests(), 1);
}

// "pay.example." is the same DNS name as "pay.example" (nginx routes it there too).
TEST_F(RoutesSpellingTest, TrailingDotHostIsTheSameHost) {
  StartWithRoutes(kPayHostRequiresKey);
  for (const char* host : {"pay.example.", "PAY.EXAMPLE.:443"}) {
    HttpResponse r = Send("/charge", WithHost(host));
    EXPECT_EQ(ErrorCodeOf(r), "idempotency_key_missing") << host << "\n" << r.raw;
  }
  EXPECT_EQ(upstream_.requests(), 0);
}

// One key, path and body sent to two host routes with two backends: the second is a 422 (the
// key names another operation), never the first backend's replay; b's backend never runs it.
TEST_F(RoutesSpellingTest, OneKeyUnderTwoHostRoutesIsA422NotAReplay) {
  FakeUpstream b;
  ASSERT_TRUE(b.Start());
  b.SetBehavior(UpstreamBehavior::Respond(201, R"({"backend":"b"})"));
  upstream_.SetBehavior(UpstreamBehavior::Respond(201, R"({"backend":"a"})"));
  Set("upstreams.a", "url", "\"http://127.0.0.1:" + std::to_string(upstream_.port()) + "\"");
  Set("upstreams.b", "url", "\"http://127.0.0.1:" + std::to_string(b.port()) + "\"");
  StartWithRoutes(R"([[routes]]
prefix = "/"
host = "a.example"
upstream = "a"
[[routes]]
prefix = "/"
host = "b.example"
upstream = "b"
)");
  HttpResponse first = Send("/charge", WithHost("a.example"), "order-1");
  EXPECT_EQ(first.status, 201) << first.raw;
  EXPECT_EQ(first.body, R"({"backend":"a"})");
  HttpResponse other = Send("/charge", WithHost("b.example"), "order-1");
  EXPECT_EQ(other.status, 422) << other.raw;
  EXPECT_EQ(ErrorCodeOf(other), "idempotency_key_reused");
  EXPECT_FALSE(other.Header("Idempotent-Replayed").has_value());
  // Nor does a host outside every route (the top level's [upstream]) get a's answer.
  EXPECT_EQ(Send("/charge", WithHost("c.example"), "order-1").status, 422);
  // The same route, spelled another way, is the same request: replayed.
  HttpResponse again = Send("/charge", WithHost("A.Example.:8080"), "order-1");
  EXPECT_EQ(again.status, 201) << again.raw;
  EXPECT_EQ(again.Header("Idempotent-Replayed").value_or(""), "true");
  EXPECT_EQ(again.body, R"({"backend":"a"})");
  EXPECT_EQ(upstream_.requests(), 1);
  EXPECT_EQ(b.requests(), 0);
}

}  // namespace
}  // namespace idemgate::test
