// SPDX-License-Identifier: Apache-2.0
// ResponseParser: each body framing, bodiless statuses, interim 1xx, EOF and limits.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "proxy/http/http_parser.h"

namespace idemgate {
namespace {

struct Result {
  size_t used = 0;
  ParseError error = ParseError::kNone;
  bool complete = false;
  Response response;
};

Result Parse(const std::string& raw, bool head = false, bool eof = false,
             uint64_t max_body = 1 << 20) {
  ResponseParser parser(max_body);
  parser.Begin(head);
  Result r;
  r.used = parser.Feed(raw.data(), raw.size());
  if (eof) parser.FeedEof();
  r.error = parser.error();
  r.complete = parser.message_complete();
  if (r.complete) r.response = parser.TakeResponse();
  return r;
}

TEST(ResponseParser, ContentLength) {
  std::string raw = "HTTP/1.1 201 Created\r\nLocation: /x\r\nContent-Length: 5\r\n\r\nhello";
  Result r = Parse(raw + "HTTP/1.1 200 OK\r\n");
  ASSERT_TRUE(r.complete);
  EXPECT_EQ(r.used, raw.size());
  EXPECT_EQ(r.response.status, 201);
  EXPECT_EQ(r.response.reason, "Created");
  EXPECT_EQ(r.response.body, "hello");
  EXPECT_TRUE(r.response.keep_alive);
  ASSERT_EQ(r.response.headers.size(), 2u);
  EXPECT_EQ(r.response.headers[0].value, "/x");
}

TEST(ResponseParser, Chunked) {
  Result r = Parse(
      "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nwiki\r\n5\r\npedia\r\n0\r\n\r\n");
  ASSERT_TRUE(r.complete);
  EXPECT_EQ(r.response.body, "wikipedia");
  EXPECT_TRUE(r.response.keep_alive);
}

// Before the fix, a transfer-coding other than chunked was stored and relayed still coded, with a
// plain Content-Length and no Content-Encoding. It is a malformed upstream response (R4).
TEST(ResponseParser, TransferCodingOtherThanChunkedIsMalformed) {
  const std::string gzip_chunked = "4\r\n\x1f\x8b\x08\x00\r\n0\r\n\r\n";
  struct Case {
    std::string head;
    std::string body;
  };
  for (const Case& c : std::vector<Case>{
           {"Transfer-Encoding: gzip, chunked\r\n", gzip_chunked},
           {"Transfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n", gzip_chunked},
           {"Transfer-Encoding: chunked, chunked\r\n", gzip_chunked},
           {"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n", gzip_chunked},
           {"Transfer-Encoding: gzip\r\n", "\x1f\x8b\x08\x00"},
           {"Transfer-Encoding: chunked, gzip\r\n", "\x1f\x8b\x08\x00"},
           {"Transfer-Encoding: identity\r\n", "abc"},
       }) {
    Result r = Parse("HTTP/1.1 200 OK\r\n" + c.head + "\r\n" + c.body, false, /*eof=*/true);
    EXPECT_FALSE(r.complete) << c.head;
    EXPECT_EQ(r.error, ParseError::kMalformed) << c.head;
  }
  ResponseParser parser(1024);
  parser.Begin(false);
  std::string raw = "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n";
  parser.Feed(raw.data(), raw.size());
  EXPECT_NE(parser.error_detail().find("Transfer-Encoding"), std::string::npos);
  // Exactly chunked, in any case and with spaces, is decoded as before.
  Result plain = Parse("HTTP/1.1 200 OK\r\nTransfer-Encoding:  Chunked \r\n\r\n" +
                       std::string("2\r\nok\r\n0\r\n\r\n"));
  ASSERT_TRUE(plain.complete);
  EXPECT_EQ(plain.response.body, "ok");
}

// No body follows a response to HEAD: its Transfer-Encoding only describes the body a GET would
// have had (RFC 9112 6.1), so it is harmless.
TEST(ResponseParser, TransferCodingOfAHeadAnswerIsAccepted) {
  Result head = Parse("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", true);
  EXPECT_TRUE(head.complete);
  EXPECT_EQ(head.error, ParseError::kNone);
}

TEST(ResponseParser, CloseDelimitedCompletesOnEof) {
  std::string raw = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil the end";
  ResponseParser parser(1024);
  parser.Begin(false);
  EXPECT_EQ(parser.Feed(raw.data(), raw.size()), raw.size());
  EXPECT_FALSE(parser.message_complete());
  parser.FeedEof();
  ASSERT_TRUE(parser.message_complete());
  Response resp = parser.TakeResponse();
  EXPECT_EQ(resp.body, "until the end");
  EXPECT_FALSE(resp.keep_alive);
}

TEST(ResponseParser, UpstreamSaidClose) {
  Result r = Parse("HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok");
  ASSERT_TRUE(r.complete);
  EXPECT_FALSE(r.response.keep_alive);
}

TEST(ResponseParser, HeadResponseHasNoBody) {
  std::string raw = "HTTP/1.1 200 OK\r\nContent-Length: 1234\r\n\r\n";
  Result r = Parse(raw, /*head=*/true);
  ASSERT_TRUE(r.complete);
  EXPECT_EQ(r.used, raw.size());
  EXPECT_TRUE(r.response.body.empty());
  EXPECT_TRUE(r.response.keep_alive);
  // Without Begin(true) the same bytes wait for 1234 body bytes.
  EXPECT_FALSE(Parse(raw, /*head=*/false).complete);
}

TEST(ResponseParser, NoContentAndNotModifiedHaveNoBody) {
  for (const char* raw :
       {"HTTP/1.1 204 No Content\r\n\r\n", "HTTP/1.1 304 Not Modified\r\nETag: \"x\"\r\n\r\n"}) {
    Result r = Parse(raw);
    ASSERT_TRUE(r.complete) << raw;
    EXPECT_TRUE(r.response.body.empty());
    EXPECT_TRUE(r.response.keep_alive);
  }
}

TEST(ResponseParser, InterimResponsesAreSkipped) {
  Result r = Parse(
      "HTTP/1.1 100 Continue\r\n\r\n"
      "HTTP/1.1 103 Early Hints\r\nLink: </s.css>\r\n\r\n"
      "HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok");
  ASSERT_TRUE(r.complete);
  EXPECT_EQ(r.response.status, 201);
  EXPECT_EQ(r.response.reason, "Created");
  ASSERT_EQ(r.response.headers.size(), 1u);  // nothing of the 103 leaks in
  EXPECT_EQ(r.response.headers[0].name, "Content-Length");
  EXPECT_EQ(r.response.body, "ok");
}

TEST(ResponseParser, InterimSplitAcrossFeeds) {
  std::string raw = "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nx";
  ResponseParser parser(1024);
  parser.Begin(false);
  for (size_t i = 0; i < raw.size(); ++i) ASSERT_EQ(parser.Feed(&raw[i], 1), 1u) << i;
  ASSERT_TRUE(parser.message_complete());
  EXPECT_EQ(parser.TakeResponse().status, 200);
}

TEST(ResponseParser, SwitchingProtocolsIsMalformed) {
  Result r =
      Parse("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: ws\r\n\r\n");
  EXPECT_EQ(r.error, ParseError::kMalformed);
}

TEST(ResponseParser, EofMidBodyIsMalformed) {
  Result r = Parse("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", false, /*eof=*/true);
  EXPECT_FALSE(r.complete);
  EXPECT_EQ(r.error, ParseError::kMalformed);
  Result chunked =
      Parse("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab", false, true);
  EXPECT_EQ(chunked.error, ParseError::kMalformed);
}

TEST(ResponseParser, EofBeforeAnyByteIsMalformedAndNotStarted) {
  ResponseParser parser(1024);
  parser.Begin(false);
  parser.FeedEof();
  EXPECT_FALSE(parser.started());
  EXPECT_EQ(parser.error(), ParseError::kMalformed);
}

TEST(ResponseParser, EofMidHeadersIsMalformedAndStarted) {
  ResponseParser parser(1024);
  parser.Begin(false);
  std::string raw = "HTTP/1.1 200 OK\r\nContent-";
  parser.Feed(raw.data(), raw.size());
  EXPECT_TRUE(parser.started());
  parser.FeedEof();
  EXPECT_EQ(parser.error(), ParseError::kMalformed);
}

TEST(ResponseParser, OversizeBody) {
  EXPECT_EQ(Parse("HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\n", false, false, 10).error,
            ParseError::kBodyTooLarge);
  EXPECT_EQ(Parse("HTTP/1.1 200 OK\r\n\r\n" + std::string(11, 'x'), false, false, 10).error,
            ParseError::kBodyTooLarge);
  EXPECT_EQ(Parse("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n6\r\nabcdef\r\n"
                  "6\r\nabcdef\r\n0\r\n\r\n",
                  false, false, 10)
                .error,
            ParseError::kBodyTooLarge);
  EXPECT_TRUE(
      Parse("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n0123456789", false, false, 10).complete);
}

TEST(ResponseParser, GarbageIsMalformed) {
  EXPECT_EQ(Parse("SSH-2.0-OpenSSH_9.2\r\n").error, ParseError::kMalformed);
  EXPECT_EQ(Parse("HTTP/1.1 2x0 OK\r\n\r\n").error, ParseError::kMalformed);
  EXPECT_EQ(Parse("HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab").error,
            ParseError::kMalformed);
}

TEST(ResponseParser, BeginResetsForTheNextResponseOnTheSameConnection) {
  ResponseParser parser(1024);
  parser.Begin(false);
  std::string a = "HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\na";
  parser.Feed(a.data(), a.size());
  ASSERT_TRUE(parser.message_complete());
  EXPECT_EQ(parser.TakeResponse().body, "a");
  parser.Begin(true);
  EXPECT_FALSE(parser.started());
  std::string b = "HTTP/1.1 404 Not Found\r\nContent-Length: 9\r\n\r\n";
  EXPECT_EQ(parser.Feed(b.data(), b.size()), b.size());
  ASSERT_TRUE(parser.message_complete());
  EXPECT_EQ(parser.TakeResponse().status, 404);
}

// Fuzzer finding (response_fuzz): llhttp takes a status of one to three digits, so
// "HTTP/1.1 3 40Not Modified" was a final response with status 3, stored and replayed as such.
TEST(ResponseParser, StatusOutsideOneHundredToFiveNinetyNineIsMalformed) {
  for (std::string line :
       {"HTTP/1.1 3 40Not Modified", "HTTP/1.1 99 X", "HTTP/1.1 600 X", "HTTP/1.1 999 X"}) {
    Result r = Parse(line + "\r\nContent-Length: 0\r\n\r\n");
    EXPECT_EQ(r.error, ParseError::kMalformed) << line;
    EXPECT_FALSE(r.complete) << line;
  }
  Result edge = Parse("HTTP/1.1 599 Edge\r\nContent-Length: 0\r\n\r\n");
  ASSERT_TRUE(edge.complete);
  EXPECT_EQ(edge.response.status, 599);
}

TEST(ResponseParser, ChunkDataMustEndInCrlf) {
  Result bad = Parse("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcXY0\r\n\r\n");
  EXPECT_EQ(bad.error, ParseError::kMalformed);
  Result ok = Parse("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n");
  ASSERT_TRUE(ok.complete);
  EXPECT_EQ(ok.response.body, "abc");
}

// Fuzzer finding (response_fuzz, whole vs split): llhttp may end a skipped 1xx before the
// header scanner does; the next response's bytes then went to llhttp unscanned when they came
// in one piece. Feed now pauses after each 1xx and scans the next response from its first byte.
TEST(ResponseParser, BytesAfterAnInterimResponseAreScannedWhateverTheSplit) {
  const std::string raw(
      "HTTP/1.1 100 Continue\x0d\x0a\x0d\x0aHTTP/1.1 103 Eary Hints\x00"
      "1/1.1 12\x00"
      "0"
      "3 Early\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"
      "\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00 Hioniontin0\x03"
      "\x00\x00\x00\x1e\x1e\x1e\x1e\x1e\x1e\x1e\x1e\x1e\x1e\x1e\x1e\x1e\x1e\x1e\x1e\x1e\x1e"
      "\x1e\x1e\x1e\x1e\x1e\x1e\x1e\x1e\x1e\x1e\x1e"
      "200 TTP/0.1 200 K\x0d\x0aTransfer-E"
      "ncoding: chunked\x0d\x0aX-A: 1\x0d\x0a\x0d\x0a"
      "3\x0d\x0a"
      "abc\x0d\x0a"
      "0\x0d\x0a"
      "X-T: nlivg: chue\x0d\x0a\x0d\x0aHTTP/1.1 103 EarlTP/]ontinue\x0d:\x0d\x0aHTTP/1.1"
      " 301 EarlTP/]1.\xff\xff\xff\x00"
      "1 100 Continue\x0d\x0a\x0d\x0aHTTP/1.1 103 Early"
      " Hints\x00"
      "1/1.1 103 Early\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"
      "\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"
      "2.\xff\xff\xff\x00"
      "1 10\x00\x00"
      "\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"
      "\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"
      "0 Continue\x0d\x0a\x0d"
      "\x0aHTTP/1.1 051 Early Hints\x00"
      "0/1.1 103 Early\x00\x00\x00\x00\x00\x00\x00\x00"
      "tinue\x0d\x0a\x0d\x0aH$TTP/1.1 103ed\x0d\x0aX-A: \x0d\x0aok",
      523);
  Result whole = Parse(raw, false, true);
  ResponseParser parser(1 << 20);
  parser.Begin(false);
  for (char c : raw) {
    if (parser.error() != ParseError::kNone || parser.message_complete()) break;
    parser.Feed(&c, 1);
  }
  if (!parser.message_complete() && parser.error() == ParseError::kNone) parser.FeedEof();
  EXPECT_EQ(whole.error, parser.error());
  EXPECT_EQ(whole.complete, parser.message_complete());
  EXPECT_EQ(whole.error, ParseError::kMalformed);
}

// A streamed response: Feed holds after the head (TakeHead gives it, with its framing), then the
// body goes to the sink piece by piece with no limit of its own beyond the parser's.
TEST(ResponseParser, StreamedResponseGivesTheHeadThenPieces) {
  ResponseParser parser(UINT64_MAX);
  std::string pieces;
  parser.Begin(false, [&](std::string_view p) { pieces.append(p).append("|"); });
  std::string raw =
      "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
      "3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n";
  size_t used = parser.Feed(raw.data(), raw.size());
  ASSERT_TRUE(parser.headers_complete()) << parser.error_detail();
  EXPECT_TRUE(pieces.empty());
  Response head = parser.TakeHead();
  EXPECT_EQ(head.status, 200);
  EXPECT_TRUE(head.chunked);
  EXPECT_EQ(head.content_length, -1);
  used += parser.Feed(raw.data() + used, raw.size() - used);
  EXPECT_EQ(used, raw.size());
  ASSERT_TRUE(parser.message_complete());
  EXPECT_EQ(pieces, "abc|de|");
  EXPECT_TRUE(parser.TakeResponse().body.empty());
}

// A streamed head's list given back serves the next response: that one has its own headers only.
TEST(ResponseParser, HeadersGivenBackHoldOnlyTheNextResponsesHeaders) {
  ResponseParser parser(UINT64_MAX);
  parser.Begin(false, [](std::string_view) {});
  std::string first = "HTTP/1.1 200 OK\r\nX-First: 1\r\nContent-Length: 2\r\n\r\nok";
  size_t used = parser.Feed(first.data(), first.size());
  ASSERT_TRUE(parser.headers_complete()) << parser.error_detail();
  Response head = parser.TakeHead();
  ASSERT_EQ(head.headers.size(), 2u);
  parser.GiveBackHeaders(std::move(head.headers));
  parser.Feed(first.data() + used, first.size() - used);
  ASSERT_TRUE(parser.message_complete());
  EXPECT_TRUE(parser.TakeResponse().headers.empty());  // they went with the head
  parser.Begin(false);
  std::string second = "HTTP/1.1 201 Created\r\nX-Second: 2\r\nContent-Length: 0\r\n\r\n";
  parser.Feed(second.data(), second.size());
  ASSERT_TRUE(parser.message_complete()) << parser.error_detail();
  Response next = parser.TakeResponse();
  EXPECT_EQ(next.status, 201);
  ASSERT_EQ(next.headers.size(), 2u);
  EXPECT_EQ(next.headers[0].name, "X-Second");
  EXPECT_EQ(next.headers[1].name, "Content-Length");
}

// Given back answer after answer, the heads' long values lend their room to the next: each head
// holds exactly its own.
TEST(ResponseParser, LongValuesOfEachHeadAreItsOwn) {
  ResponseParser parser(UINT64_MAX);
  for (int i = 0; i < 6; ++i) {
    parser.Begin(false, [](std::string_view) {});
    const std::string date = "Thu, 0" + std::to_string(i) + " Dec 2026 10:00:00 GMT";
    const std::string big(30 + 70 * i, static_cast<char>('a' + i));
    std::string raw = "HTTP/1.1 200 OK\r\nDate: " + date + "\r\nX-Big: " + big +
                      "\r\nContent-Length: 2\r\n\r\nok";
    size_t used = 0;
    if (i % 2 == 0) {
      used = parser.Feed(raw.data(), raw.size());
    } else {
      while (!parser.headers_complete() && used < raw.size()) used += parser.Feed(&raw[used], 1);
    }
    ASSERT_TRUE(parser.headers_complete()) << i << ": " << parser.error_detail();
    Response head = parser.TakeHead();
    ASSERT_EQ(head.headers.size(), 3u) << i;
    EXPECT_EQ(head.headers[0].value, date) << i;
    EXPECT_EQ(head.headers[1].value, big) << i;
    parser.GiveBackHeaders(std::move(head.headers));
    if (used < raw.size()) parser.Feed(raw.data() + used, raw.size() - used);
    ASSERT_TRUE(parser.message_complete()) << i;
    parser.TakeResponse();
  }
}

}  // namespace
}  // namespace idemgate
