// SPDX-License-Identifier: Apache-2.0
// Through the real binary: SPEC §7 bad input and limits (400, 408, 413, 431, idle close), each
// answered with a JSON error, the connection closed, nothing stored and nothing sent upstream;
// pipelining in order, Expect: 100-continue and HTTP/1.0 keep-alive.
#include <regex>

#include "tests/integration/gateway_fixture.h"

namespace idemgate::test {
namespace {

using namespace std::chrono_literals;

const std::string kHead =
    "POST /v1/payment_intents HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer merchant-demo\r\n";

class LimitsHttpTest : public GatewayTest {
 protected:
  void SetUp() override {
    GatewayTest::SetUp();
    Set("limits", "max_request_body", "\"1KiB\"");
    Set("limits", "max_header_bytes", "\"2KiB\"");
    Set("limits", "client_timeout", "\"500ms\"");
    Set("limits", "idle_timeout", "\"700ms\"");
    StartGateway();
  }

  // Sends `bytes` on a fresh connection; expects `status` with the JSON `code`, then a close.
  void ExpectRejected(const std::string& bytes, int status, const std::string& code) {
    TestClient client(port_);
    ASSERT_TRUE(client.SendRaw(bytes));
    HttpResponse r = client.ReadResponse(3s);
    ASSERT_EQ(r.status, status) << r.raw;
    EXPECT_EQ(ErrorCodeOf(r), code) << r.body;
    EXPECT_EQ(r.Header("Content-Type"), "application/json");
    EXPECT_EQ(r.Header("Connection"), "close");
    EXPECT_TRUE(client.IsClosed(4s));
  }

  // Nothing reached the upstream and nothing was stored: the same key now executes fresh.
  void ExpectKeyUntouched(const std::string& key) {
    EXPECT_EQ(upstream_.requests(), 0);
    HttpResponse r = Post(key, "{}");
    EXPECT_EQ(r.status, 201) << r.raw;
    EXPECT_FALSE(r.Header("Idempotent-Replayed").has_value());
    EXPECT_EQ(upstream_.requests(), 1);
  }
};

TEST_F(LimitsHttpTest, SlowClientGets408AndNothingIsStored) {
  TestClient client(port_);
  ASSERT_TRUE(client.SendRaw(kHead + "Idempotency-Key: k-slow\r\nContent-Length: 10\r\n\r\n{\"a\""));
  auto start = std::chrono::steady_clock::now();
  HttpResponse r = client.ReadResponse(5s);
  ASSERT_EQ(r.status, 408) << r.raw;
  EXPECT_GE(std::chrono::steady_clock::now() - start, 300ms);
  EXPECT_EQ(ErrorCodeOf(r), "request_timeout");
  EXPECT_TRUE(client.IsClosed(4s));
  ExpectKeyUntouched("k-slow");
}

TEST_F(LimitsHttpTest, IdleKeepAliveConnectionIsClosedSilently) {
  TestClient client(port_);
  HttpResponse first = client.Request("POST", "/v1/payment_intents", kMerchant, "{}");
  ASSERT_EQ(first.status, 201);
  EXPECT_TRUE(client.IsClosed(5s));
  HttpResponse after = client.ReadResponse(100ms);
  EXPECT_EQ(after.raw, "");  // no bytes sent back, not even a 408
  TestClient silent(port_);  // a connection that never sends a byte
  EXPECT_TRUE(silent.IsClosed(5s));
  EXPECT_EQ(silent.ReadResponse(100ms).raw, "");
}

TEST_F(LimitsHttpTest, ContentLengthOverLimitIs413WithoutReadingTheBody) {
  // Only the head is sent; the answer cannot have waited for the 5000 body bytes.
  ExpectRejected(kHead + "Idempotency-Key: k-big\r\nContent-Length: 5000\r\n\r\n", 413,
                 "request_too_large");
  // With Expect: 100-continue the 413 comes instead of a 100 (ReadResponse returns a 1xx too).
  ExpectRejected(kHead +
                     "Idempotency-Key: k-big\r\nExpect: 100-continue\r\nContent-Length: 5000\r\n\r\n",
                 413, "request_too_large");
  ExpectKeyUntouched("k-big");
}

TEST_F(LimitsHttpTest, ChunkedBodyOverLimitIs413) {
  std::string chunk(600, 'x');
  ExpectRejected(kHead + "Idempotency-Key: k-bigchunk\r\nTransfer-Encoding: chunked\r\n\r\n" +
                     "258\r\n" + chunk + "\r\n258\r\n" + chunk + "\r\n",
                 413, "request_too_large");
  ExpectKeyUntouched("k-bigchunk");
}

TEST_F(LimitsHttpTest, HeadersOverLimitAre431) {
  ExpectRejected(kHead + "Idempotency-Key: k-head\r\nX-Pad: " + std::string(3000, 'p') +
                     "\r\nContent-Length: 2\r\n\r\n{}",
                 431, "headers_too_large");
  ExpectKeyUntouched("k-head");
}

struct BadShape {
  const char* name;
  std::string bytes;
};

TEST_F(LimitsHttpTest, MalformedAndSmugglingShapesAre400) {
  const std::string key = "Idempotency-Key: k-bad\r\n";
  std::vector<BadShape> shapes = {
      {"CL+TE", kHead + key +
                    "Content-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n"},
      {"two CLs", kHead + key + "Content-Length: 2\r\nContent-Length: 3\r\n\r\n{}}"},
      {"bad chunk size", kHead + key + "Transfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n"},
      {"obs-fold", kHead + key + "X-Folded: a\r\n b\r\nContent-Length: 2\r\n\r\n{}"},
      {"bare LF", "POST /v1/payment_intents HTTP/1.1\nHost: x\r\n"
                  "Authorization: Bearer merchant-demo\r\n" +
                      key + "Content-Length: 2\r\n\r\n{}"},
      {"garbage", "\x01\x02 not http at all\r\n\r\n"},
      {"TE not chunked", kHead + key + "Transfer-Encoding: gzip\r\n\r\n{}"},
  };
  for (const BadShape& s : shapes) {
    SCOPED_TRACE(s.name);
    ExpectRejected(s.bytes, 400, "bad_request");
  }
  ExpectKeyUntouched("k-bad");
}

TEST_F(LimitsHttpTest, PipelinedRequestsAreAnsweredInOrder) {
  for (const char* body : {"one", "two", "three"}) {
    upstream_.EnqueueBehavior(UpstreamBehavior::Respond(201, body));
  }
  std::string bytes;
  int i = 0;
  for (const char* key : {"k-p1", "k-p2", "k-p3"}) {
    RequestSpec spec{"POST", "/v1/payment_intents", kMerchant, "{\"n\":" + std::to_string(++i) + "}"};
    spec.headers.emplace_back("Idempotency-Key", key);
    bytes += TestClient::BuildRequest(spec);
  }
  TestClient client(port_);
  ASSERT_TRUE(client.SendRaw(bytes));  // one write
  for (const char* body : {"one", "two", "three"}) {
    HttpResponse r = client.ReadResponse(3s);
    EXPECT_EQ(r.status, 201) << r.raw;
    EXPECT_EQ(r.body, body);
  }
  std::vector<RecordedRequest> got = upstream_.received();
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0].Header("Idempotency-Key"), "k-p1");
  EXPECT_EQ(got[2].Header("Idempotency-Key"), "k-p3");
  // Each was stored under its own key.
  EXPECT_EQ(Post("k-p2", "{\"n\":2}").body, "two");
  EXPECT_EQ(upstream_.requests(), 3);
}

TEST_F(LimitsHttpTest, ExpectContinueThenBody) {
  TestClient client(port_);
  ASSERT_TRUE(client.SendRaw(kHead +
                             "Idempotency-Key: k-100\r\nExpect: 100-continue\r\n"
                             "Content-Length: 12\r\n\r\n"));
  HttpResponse interim = client.ReadResponse(3s);
  ASSERT_EQ(interim.status, 100) << interim.raw;
  EXPECT_EQ(interim.raw, "HTTP/1.1 100 Continue\r\n\r\n");
  EXPECT_EQ(upstream_.requests(), 0);
  ASSERT_TRUE(client.SendRaw(R"({"amount":9})"));
  HttpResponse r = client.ReadResponse(3s);
  EXPECT_EQ(r.status, 201) << r.raw;
  ASSERT_EQ(upstream_.requests(), 1);
  EXPECT_EQ(upstream_.last_request()->body, R"({"amount":9})");
  EXPECT_EQ(Post("k-100", R"({"amount":9})").Header("Idempotent-Replayed"), "true");
}

// An HTTP/1.0 client that asks for keep-alive is told it was granted (Connection: keep-alive, as
// such clients wait for it before reusing), and gets its replay on the same connection; one that
// does not ask is answered with Connection: close and the connection closes.
TEST_F(LimitsHttpTest, Http10KeepAliveIsGrantedAloud) {
  upstream_.EnqueueBehavior(UpstreamBehavior::Respond(201, "paid"));
  const std::string request =
      "POST /v1/payment_intents HTTP/1.0\r\nHost: x\r\nAuthorization: Bearer merchant-demo\r\n"
      "Idempotency-Key: k-10\r\nContent-Length: 12\r\n";
  TestClient client(port_);
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(client.SendRaw(request + "Connection: keep-alive\r\n\r\n" + R"({"amount":9})"));
    HttpResponse r = client.ReadResponse(3s);
    EXPECT_EQ(r.status, 201) << r.raw;
    EXPECT_EQ(r.body, "paid");
    EXPECT_EQ(r.Header("Connection"), "keep-alive") << r.raw;
    EXPECT_EQ(r.HeaderCount("Idempotent-Replayed"), i) << r.raw;
  }
  EXPECT_EQ(upstream_.requests(), 1);
  ASSERT_TRUE(client.SendRaw(request + "\r\n" + R"({"amount":9})"));
  HttpResponse last = client.ReadResponse(3s);
  EXPECT_EQ(last.status, 201) << last.raw;
  EXPECT_EQ(last.Header("Connection"), "close") << last.raw;
  EXPECT_TRUE(client.IsClosed(2s));
}

}  // namespace
}  // namespace idemgate::test
