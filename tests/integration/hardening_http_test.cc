// SPDX-License-Identifier: Apache-2.0
// Through the real binary: HTTP holes closed — a response transfer-coding the gateway does not
// decode, fingerprint header occurrences, require_key on the normalized path, and headers that
// must reach the upstream listed in Connection.
#include <cctype>

#include "tests/integration/gateway_fixture.h"

namespace idemgate::test {
namespace {

std::string Lower(std::string text) {
  for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return text;
}

HeaderList WithKey(std::string key, HeaderList headers = kMerchant) {
  headers.emplace_back("Idempotency-Key", std::move(key));
  return headers;
}

// #12: "gzip, chunked" was de-chunked, stored and replayed still gzip-coded with a plain
// Content-Length; "gzip" alone was read to the close. Both are a malformed upstream response:
// stored as 502 upstream_failed on a guarded request (R4), 502 on passthrough.
TEST_F(GatewayTest, UndecodedTransferCodingIsAFailedUpstreamResponse) {
  StartGateway();
  UpstreamBehavior gzip_chunked = UpstreamBehavior::Act(UpstreamAction::kChunked);
  gzip_chunked.headers = {{"Transfer-Encoding", "gzip, chunked"}};
  gzip_chunked.body = std::string("\x1f\x8b\x08\x00\x00\x00\x00\x00", 8);
  upstream_.SetBehavior(gzip_chunked);
  HttpResponse first = Post("te-1", "{}");
  EXPECT_EQ(first.status, 502) << first.raw;
  EXPECT_EQ(ErrorCodeOf(first), "upstream_failed") << first.raw;
  HttpResponse retry = Post("te-1", "{}");
  EXPECT_EQ(retry.status, 502);
  EXPECT_EQ(retry.Header("Idempotent-Replayed"), "true");
  EXPECT_EQ(upstream_.requests(), 1);

  UpstreamBehavior gzip = UpstreamBehavior::Act(UpstreamAction::kCloseDelimited);
  gzip.headers = {{"Transfer-Encoding", "gzip"}};
  gzip.body = gzip_chunked.body;
  upstream_.SetBehavior(gzip);
  HttpResponse passthrough = Post("", "{}");
  EXPECT_EQ(passthrough.status, 502) << passthrough.raw;
  EXPECT_EQ(ErrorCodeOf(passthrough), "upstream_failed") << passthrough.raw;
  upstream_.SetBehavior(gzip_chunked);
  EXPECT_EQ(Post("", "{}").status, 502);
  EXPECT_EQ(upstream_.requests(), 3);
}

// #13: two X-Account lines and one "a, b" line are two requests; absent and empty are two.
TEST_F(GatewayTest, FingerprintHeaderOccurrencesAreDistinctRequests) {
  Set("idempotency", "fingerprint_headers", "[\"X-Account\"]");
  StartGateway();
  HeaderList two = WithKey("fp-1");
  two.emplace_back("X-Account", "a");
  two.emplace_back("X-Account", "b");
  EXPECT_EQ(Post("", "{}", "/v1/payment_intents", two).status, 201);
  HeaderList joined = WithKey("fp-1");
  joined.emplace_back("X-Account", "a, b");
  HttpResponse reused = Post("", "{}", "/v1/payment_intents", joined);
  EXPECT_EQ(reused.status, 422) << reused.raw;
  HttpResponse exact = Post("", "{}", "/v1/payment_intents", two);
  EXPECT_EQ(exact.Header("Idempotent-Replayed"), "true") << exact.raw;

  EXPECT_EQ(Post("fp-2", "{}").status, 201);  // X-Account absent
  HeaderList empty = WithKey("fp-2");
  empty.emplace_back("X-Account", "");
  EXPECT_EQ(Post("", "{}", "/v1/payment_intents", empty).status, 422);
  EXPECT_EQ(upstream_.requests(), 2);
}

// #14: the absolute form, a doubled slash and another case all name the protected path.
TEST_F(GatewayTest, RequireKeyHoldsForEverySpellingOfThePath) {
  Set("idempotency", "require_key", "[\"/v1/pay\"]");
  StartGateway();
  // An absolute-form target names its host; the Host header agrees with it (one that names
  // another host is refused: routes_spelling_test).
  HeaderList api = kMerchant;
  api.emplace_back("Host", "api.example");
  for (const char* target :
       {"/v1/pay", "http://api.example/v1/pay", "//v1/pay", "/V1/pay", "/v1/./pay", "/v1/%70ay"}) {
    HttpResponse r = Post("", "{}", target, api);
    EXPECT_EQ(r.status, 400) << target << "\n" << r.raw;
    EXPECT_EQ(ErrorCodeOf(r), "idempotency_key_missing") << target;
  }
  EXPECT_EQ(upstream_.requests(), 0);
  // With a key the request is guarded, and the target goes upstream exactly as sent.
  EXPECT_EQ(Post("abs-1", "{}", "http://api.example//V1/pay?x=1", api).status, 201);
  HttpResponse replay = Post("abs-1", "{}", "http://api.example//V1/pay?x=1", api);
  EXPECT_EQ(replay.Header("Idempotent-Replayed"), "true");
  ASSERT_EQ(upstream_.requests(), 1);
  EXPECT_EQ(upstream_.last_request()->target, "http://api.example//V1/pay?x=1");
  EXPECT_EQ(Post("", "{}", "/v1/refunds").status, 201);  // other paths pass through
}

// #15: a client listing Host, the key header or the credential header in Connection would have
// the gateway strip it before the upstream (against G3); refused, guarded or passthrough.
TEST_F(GatewayTest, ConnectionListingAHeaderTheUpstreamNeedsIs400) {
  Set("scope", "header", "\"X-Api-Key\"");
  StartGateway();
  for (const char* listed : {"Host", "idempotency-key", "X-API-KEY"}) {
    HeaderList headers = {{"X-Api-Key", "merchant-a"}, {"Connection", std::string(listed)}};
    HttpResponse guarded = Post("conn-1", "{}", "/v1/payment_intents", headers);
    EXPECT_EQ(guarded.status, 400) << listed << "\n" << guarded.raw;
    EXPECT_EQ(ErrorCodeOf(guarded), "bad_request") << listed;
    EXPECT_NE(Lower(guarded.body).find("connection header lists " + Lower(listed)),
              std::string::npos)
        << guarded.body;
    HttpResponse passthrough = Post("", "{}", "/v1/payment_intents", headers);
    EXPECT_EQ(passthrough.status, 400) << listed;
    TestClient client(port_);
    EXPECT_EQ(client.Request("GET", "/v1/payment_intents/pi_1", headers).status, 400) << listed;
  }
  EXPECT_EQ(upstream_.requests(), 0);
  // The key was not consumed: the same key without the Connection trick executes once.
  HttpResponse plain = Post("conn-1", "{}", "/v1/payment_intents", {{"X-Api-Key", "merchant-a"}});
  EXPECT_EQ(plain.status, 201);
  EXPECT_EQ(upstream_.requests(), 1);
  ASSERT_TRUE(upstream_.last_request().has_value());
  EXPECT_EQ(upstream_.last_request()->Header("Idempotency-Key"), "conn-1");
}

}  // namespace
}  // namespace idemgate::test
