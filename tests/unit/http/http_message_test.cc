// SPDX-License-Identifier: Apache-2.0
// http_message: hop-by-hop rules, the upstream request bytes, the stored and replayed response.
#include "proxy/http/http_message.h"

#include <gtest/gtest.h>

#include <string>

namespace idemgate {
namespace {

TEST(HttpMessage, HeaderHelpers) {
  Headers h = {{"Host", "a"}, {"x-key", "1"}, {"X-KEY", "2"}};
  EXPECT_TRUE(HeaderNameEquals("Content-Length", "content-length"));
  EXPECT_FALSE(HeaderNameEquals("Content-Length", "Content-Lengt"));
  ASSERT_NE(FindHeader(h, "X-Key"), nullptr);
  EXPECT_EQ(*FindHeader(h, "X-Key"), "1");
  EXPECT_EQ(FindHeader(h, "Missing"), nullptr);
  EXPECT_EQ(CountHeader(h, "x-KEY"), 2);
  int count = -1;
  const std::string* first = FindHeaderCounted(h, "X-Key", &count);
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(*first, "1");  // the first of the two, as FindHeader
  EXPECT_EQ(count, 2);
  EXPECT_EQ(FindHeaderCounted(h, "Missing", &count), nullptr);
  EXPECT_EQ(count, 0);
  EXPECT_EQ(*FindHeaderCounted(h, "host", &count), "a");
  EXPECT_EQ(count, 1);
}

TEST(HttpMessage, HopByHop) {
  Headers h = {{"Connection", "keep-alive, X-Session-Hop"}, {"connection", " x-other "}};
  for (const char* name :
       {"Connection", "keep-alive", "Transfer-Encoding", "TE", "Trailer", "Upgrade",
        "Proxy-Connection", "proxy-authorization", "X-Session-Hop", "x-session-hop", "X-Other"}) {
    EXPECT_TRUE(IsHopByHop(name, h)) << name;
  }
  for (const char* name : {"Host", "Content-Type", "Idempotency-Key", "Trailers", "X-Session"}) {
    EXPECT_FALSE(IsHopByHop(name, h)) << name;
  }
  EXPECT_FALSE(IsHopByHop("X-Session-Hop", Headers{}));
}

TEST(HttpMessage, ConnectionTokensLookup) {
  Headers h = {{"Connection", "b-hop, A-Hop,, ,A-HOP"}, {"CONNECTION", "c-hop"}, {"X", "d"}};
  ConnectionTokens listed(h);
  for (const char* name : {"a-hop", "A-Hop", "B-HOP", "c-hop"}) EXPECT_TRUE(listed.Lists(name));
  for (const char* name : {"", "a", "a-hop-", "d", "X", "Connection"}) {
    EXPECT_FALSE(listed.Lists(name)) << name;
  }
  EXPECT_TRUE(ConnectionTokens(Headers{}).empty());
}

// More tokens than are kept inline: found by a sorted search, with the same answers.
TEST(HttpMessage, ManyConnectionTokensLookup) {
  Headers h = {{"Connection", "e-hop, b-hop, A-Hop,, ,A-HOP, f-hop"}, {"CONNECTION", "c-hop"}};
  ConnectionTokens listed(h);
  for (const char* name : {"a-hop", "A-Hop", "B-HOP", "c-hop", "E-hop", "f-HOP"}) {
    EXPECT_TRUE(listed.Lists(name)) << name;
  }
  for (const char* name : {"", "a", "a-hop-", "d-hop", "g-hop", "Connection"}) {
    EXPECT_FALSE(listed.Lists(name)) << name;
  }
}

// Before the fix, one Connection header of 12,000 tokens on a message of 9,000 headers (about
// 60 KB) cost 0.77 s of CPU, because each header re-parsed the Connection tokens. The tokens
// are counted as they are parsed: the work must be one pass per message, whatever its size.
TEST(HttpMessage, ConnectionTokensAreParsedOncePerMessage) {
  constexpr int kTokens = 12'000;
  constexpr int kHeaders = 9'000;
  Request r;
  r.method = "POST";
  r.target = "/v1/search";
  std::string connection;
  for (int i = 0; i < kTokens; ++i) connection += "t" + std::to_string(i) + ",";
  r.headers.push_back({"Connection", connection + "X-Hop-7"});
  for (int i = 0; i < kHeaders; ++i) r.headers.push_back({"X-H" + std::to_string(i), "v"});
  r.headers.push_back({"X-Hop-7", "dropped"});

  uint64_t before = ConnectionTokensParsedForTest();
  std::string upstream = SerializeUpstreamRequest(r, "192.0.2.1", "http");
  EXPECT_EQ(ConnectionTokensParsedForTest() - before, kTokens + 1u);
  EXPECT_NE(upstream.find("X-H8999: v\r\n"), std::string::npos);
  EXPECT_EQ(upstream.find("X-Hop-7: dropped"), std::string::npos);

  Response response;
  response.status = 200;
  response.headers = r.headers;
  before = ConnectionTokensParsedForTest();
  StoredResponse stored = ToStoredResponse(response, /*head_request=*/false);
  EXPECT_EQ(ConnectionTokensParsedForTest() - before, kTokens + 1u);
  EXPECT_EQ(stored.headers.size(), static_cast<size_t>(kHeaders));
}

Request PostRequest() {
  Request r;
  r.method = "POST";
  r.target = "/v1/payment_intents?expand=1";
  r.headers = {{"Host", "api.example"},
               {"Connection", "keep-alive, X-Hop"},
               {"X-Hop", "secret"},
               {"Authorization", "Bearer m"},
               {"Transfer-Encoding", "chunked"},
               {"Content-Length", "999"},
               {"X-Forwarded-For", "10.0.0.1"},
               {"X-Forwarded-Proto", "spoofed"},
               {"Expect", "100-continue"},
               {"Idempotency-Key", "order-1"},
               {"Proxy-Connection", "keep-alive"}};
  r.body = "{\"amount\":1}";
  return r;
}

TEST(HttpMessage, SerializeUpstreamRequest) {
  std::string out = SerializeUpstreamRequest(PostRequest(), "192.0.2.7", "https");
  EXPECT_EQ(out,
            "POST /v1/payment_intents?expand=1 HTTP/1.1\r\n"
            "Host: api.example\r\n"
            "Authorization: Bearer m\r\n"
            "Idempotency-Key: order-1\r\n"
            "X-Forwarded-For: 10.0.0.1, 192.0.2.7\r\n"
            "X-Forwarded-Proto: https\r\n"
            "Content-Length: 12\r\n"
            "\r\n"
            "{\"amount\":1}");
}

// SPEC §12 A1: the fencing headers are the gateway's. A client's copies never go upstream (any
// case, guarded or streamed); the gateway's own lines are added before the framing.
TEST(HttpMessage, ClientFencingHeadersAreDroppedAndTheGatewaysAdded) {
  Request r = PostRequest();
  r.headers.emplace_back("Idempotency-Attempt", "1");
  r.headers.emplace_back("idempotency-record", "00000000000000000000000000000000");
  r.headers.emplace_back("IDEMPOTENCY-ATTEMPT", "7");
  std::string out = SerializeUpstreamRequest(
      r, "192.0.2.7", "https", {}, {}, "Idempotency-Attempt: 2\r\nIdempotency-Record: ab\r\n");
  EXPECT_EQ(out,
            "POST /v1/payment_intents?expand=1 HTTP/1.1\r\n"
            "Host: api.example\r\n"
            "Authorization: Bearer m\r\n"
            "Idempotency-Key: order-1\r\n"
            "X-Forwarded-For: 10.0.0.1, 192.0.2.7\r\n"
            "X-Forwarded-Proto: https\r\n"
            "Idempotency-Attempt: 2\r\n"
            "Idempotency-Record: ab\r\n"
            "Content-Length: 12\r\n"
            "\r\n"
            "{\"amount\":1}");
  r.content_length = 12;
  std::string head = SerializeUpstreamRequestHead(r, "192.0.2.7", "https");
  EXPECT_EQ(head.find("dempotency-Attempt"), std::string::npos) << head;
  EXPECT_EQ(head.find("dempotency-Record"), std::string::npos) << head;
  EXPECT_EQ(head.find("DEMPOTENCY"), std::string::npos) << head;
}

TEST(HttpMessage, UpstreamRequestContentLengthRules) {
  Request get;
  get.method = "GET";
  get.target = "/";
  std::string g = SerializeUpstreamRequest(get, "1.2.3.4", "http");
  EXPECT_EQ(g, "GET / HTTP/1.1\r\nX-Forwarded-For: 1.2.3.4\r\nX-Forwarded-Proto: http\r\n\r\n");
  Request empty_post = get;
  empty_post.method = "POST";
  EXPECT_NE(SerializeUpstreamRequest(empty_post, "1.2.3.4", "http").find("Content-Length: 0\r\n"),
            std::string::npos);
  Request delete_with_body = get;
  delete_with_body.method = "DELETE";
  delete_with_body.body = "xy";
  EXPECT_NE(
      SerializeUpstreamRequest(delete_with_body, "1.2.3.4", "http").find("Content-Length: 2\r\n"),
      std::string::npos);
}

Response UpstreamResponse() {
  Response r;
  r.status = 201;
  r.reason = "Created";
  r.headers = {{"Content-Type", "application/json"},
               {"Connection", "close, X-Drop"},
               {"X-Drop", "1"},
               {"Content-Length", "15"},
               {"Location", "/v1/payment_intents/pi_1"},
               {"Keep-Alive", "timeout=5"},
               {"Set-Cookie", "a=1"},
               {"Set-Cookie", "b=2"}};
  r.body = "{\"id\":\"pi_1\"}  ";
  return r;
}

TEST(HttpMessage, ToStoredResponseDropsHopByHopAndLength) {
  StoredResponse s = ToStoredResponse(UpstreamResponse(), /*head_request=*/false);
  EXPECT_EQ(s.status, 201);
  EXPECT_EQ(s.reason, "Created");
  std::vector<std::pair<std::string, std::string>> expected = {
      {"Content-Type", "application/json"},
      {"Location", "/v1/payment_intents/pi_1"},
      {"Set-Cookie", "a=1"},
      {"Set-Cookie", "b=2"}};
  EXPECT_EQ(s.headers, expected);
  EXPECT_EQ(s.body, "{\"id\":\"pi_1\"}  ");
}

// A relay turns answer after answer into the same StoredResponse: each holds only its own.
TEST(HttpMessage, ToStoredResponseIntoAKeptOneHoldsOnlyThatAnswer) {
  StoredResponse kept;
  ToStoredResponse(UpstreamResponse(), false, AnswerUse::kRelayed, &kept);
  Response second;
  second.status = 204;
  second.reason = "No Content";
  second.headers = {{"Age", "3"}, {"Connection", "close"}, {"X-Second", "2"}};
  ToStoredResponse(std::move(second), false, AnswerUse::kRelayed, &kept);
  EXPECT_EQ(kept.status, 204);
  EXPECT_EQ(kept.reason, "No Content");
  // A relayed answer keeps Age (it is not stored); Connection is hop-by-hop.
  std::vector<std::pair<std::string, std::string>> expected = {{"Age", "3"}, {"X-Second", "2"}};
  EXPECT_EQ(kept.headers, expected);
  EXPECT_EQ(kept.body, "");
}

// R2: Idempotent-Replayed is the gateway's; one sent by a backend (that deduplicates too) is
// not stored, so a first answer never carries it and a replay carries it once.
TEST(HttpMessage, UpstreamIdempotentReplayedIsNotStored) {
  Response r = UpstreamResponse();
  r.headers.emplace_back("idempotent-replayed", "true");
  StoredResponse s = ToStoredResponse(r, /*head_request=*/false);
  std::string first = SerializeResponse(s, false, ConnectionHeader::kNone, false);
  std::string replay = SerializeResponse(s, true, ConnectionHeader::kNone, false);
  EXPECT_EQ(first.find("dempotent-Replayed"), std::string::npos) << first;
  EXPECT_EQ(first.find("dempotent-replayed"), std::string::npos) << first;
  EXPECT_EQ(replay.find("Idempotent-Replayed"), replay.rfind("Idempotent-Replayed")) << replay;
}

// Every answer carries its own request's X-Request-Id: the upstream's (an echo of the first
// request's id) is not stored, and the id given to the serializer replaces any stored one.
TEST(HttpMessage, EachAnswerCarriesItsOwnRequestId) {
  Response r = UpstreamResponse();
  r.headers.emplace_back("x-request-id", "first-request");
  StoredResponse s = ToStoredResponse(r, /*head_request=*/false);
  for (const auto& [name, value] : s.headers) EXPECT_NE(value, "first-request") << name;
  std::string replay = SerializeResponse(s, true, ConnectionHeader::kNone, false, "second");
  EXPECT_NE(replay.find("\r\nX-Request-Id: second\r\nIdempotent-Replayed: true\r\n"),
            std::string::npos)
      << replay;
  s.headers.emplace_back("X-Request-Id", "stored-before");  // a record written before this
  replay = SerializeResponse(s, true, ConnectionHeader::kNone, false, "third");
  EXPECT_EQ(replay.find("stored-before"), std::string::npos) << replay;
  EXPECT_EQ(replay.find("X-Request-Id"), replay.rfind("X-Request-Id")) << replay;
  // Without an id (an answer before any request was read), the headers are as stored.
  EXPECT_NE(SerializeResponse(s, false, ConnectionHeader::kNone, false).find("stored-before"),
            std::string::npos);
}

TEST(HttpMessage, AnswerToHeadKeepsTheUpstreamLengthOnce) {
  Response r = UpstreamResponse();
  r.status = 200;
  r.reason = "OK";
  r.body.clear();  // a HEAD answer has none
  StoredResponse s = ToStoredResponse(r, /*head_request=*/true);
  std::string bytes = SerializeResponse(s, false, ConnectionHeader::kNone, /*head_request=*/true);
  EXPECT_NE(bytes.find("Content-Length: 15\r\n"), std::string::npos) << bytes;
  EXPECT_EQ(bytes.find("Content-Length"), bytes.rfind("Content-Length")) << bytes;
  EXPECT_EQ(bytes.find("Keep-Alive"), std::string::npos) << bytes;
}

TEST(HttpMessage, FirstAnswerAndReplayDifferOnlyByTheReplayedLine) {
  StoredResponse s = ToStoredResponse(UpstreamResponse(), /*head_request=*/false);
  std::string first = SerializeResponse(s, /*replayed=*/false, ConnectionHeader::kNone, false);
  std::string replay = SerializeResponse(s, /*replayed=*/true, ConnectionHeader::kNone, false);
  EXPECT_EQ(first,
            "HTTP/1.1 201 Created\r\n"
            "Content-Type: application/json\r\n"
            "Location: /v1/payment_intents/pi_1\r\n"
            "Set-Cookie: a=1\r\n"
            "Set-Cookie: b=2\r\n"
            "Content-Length: 15\r\n"
            "\r\n"
            "{\"id\":\"pi_1\"}  ");
  std::string line = "Idempotent-Replayed: true\r\n";
  size_t at = replay.find(line);
  ASSERT_NE(at, std::string::npos);
  EXPECT_EQ(first.find("Idempotent-Replayed"), std::string::npos);
  EXPECT_EQ(replay.substr(0, at) + replay.substr(at + line.size()), first);
}

TEST(HttpMessage, SerializeResponseFraming) {
  StoredResponse s;
  s.status = 204;
  s.headers = {{"X-A", "1"}};
  EXPECT_EQ(SerializeResponse(s, false, ConnectionHeader::kClose, false),
            "HTTP/1.1 204 No Content\r\nX-A: 1\r\nConnection: close\r\n\r\n");
  s.status = 200;
  s.reason = "Fine";
  s.body = "abc";
  EXPECT_EQ(SerializeResponse(s, false, ConnectionHeader::kNone, /*head_request=*/true),
            "HTTP/1.1 200 Fine\r\nX-A: 1\r\nContent-Length: 3\r\n\r\n");
  s.body.clear();
  EXPECT_EQ(SerializeResponse(s, false, ConnectionHeader::kNone, true),
            "HTTP/1.1 200 Fine\r\nX-A: 1\r\n\r\n");
  EXPECT_EQ(SerializeResponse(s, false, ConnectionHeader::kNone, false),
            "HTTP/1.1 200 Fine\r\nX-A: 1\r\nContent-Length: 0\r\n\r\n");
  EXPECT_EQ(SerializeResponse(s, false, ConnectionHeader::kKeepAlive, false),
            "HTTP/1.1 200 Fine\r\nX-A: 1\r\nContent-Length: 0\r\nConnection: keep-alive\r\n\r\n");
  s.status = 599;
  s.reason.clear();
  EXPECT_EQ(SerializeResponse(s, false, ConnectionHeader::kNone, false).substr(0, 22),
            "HTTP/1.1 599 Unknown\r\n");
}

}  // namespace
}  // namespace idemgate
