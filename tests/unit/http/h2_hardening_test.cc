// SPDX-License-Identifier: Apache-2.0
// H2Session under SPEC §14 H5 and the smuggling rules that apply over HTTP/2: the limits
// (streams, header list, body), the floods and bombs that end a connection with GOAWAY at a
// bounded cost, and the malformed requests that never reach the gateway. Raw frames stand in
// for what nghttp2's own client would refuse to send.
#include <gtest/gtest.h>

#include <string>

#include "tests/unit/http/h2_test_peer.h"

namespace idemgate {
namespace {

using h2test::Encoder;
using h2test::Fields;
using h2test::FindFrame;
using h2test::Frame;
using h2test::ParseFrames;
using h2test::PostHead;
using h2test::Pump;
using h2test::Recorder;
using h2test::TestClient;

// A session fed raw bytes; its answer bytes are parsed into frames.
struct Raw {
  explicit Raw(H2Limits limits = {}) : server(&handler, WithClock(std::move(limits))) {
    handler.session = &server;
    server.Receive(h2test::Preface());
  }
  H2Limits WithClock(H2Limits limits) {
    limits.now_ms = [this] { return now_ms; };
    return limits;
  }
  std::vector<h2test::SeenFrame> Out() {
    sent += h2test::Drain(server);
    return ParseFrames(sent);
  }
  // A request's HEADERS frame (END_HEADERS; END_STREAM when `end`).
  std::string Headers(int32_t stream, const Fields& fields, bool end = true) {
    return Frame(NGHTTP2_HEADERS, NGHTTP2_FLAG_END_HEADERS | (end ? NGHTTP2_FLAG_END_STREAM : 0),
                 stream, encoder.Block(fields));
  }
  int64_t now_ms = 1'000;
  Recorder handler;
  H2Session server;
  Encoder encoder;
  std::string sent;
};

uint32_t GoawayCode(const std::vector<h2test::SeenFrame>& frames) {
  const h2test::SeenFrame* f = FindFrame(frames, NGHTTP2_GOAWAY);
  return f == nullptr ? 0xffffffff : f->code;
}

// ----- Limits -----

TEST(H2Limits, StreamsPastTheLimitAreRefusedUnstarted) {
  H2Limits limits;
  limits.max_streams = 5;
  Recorder handler;
  H2Session server(&handler, limits);
  handler.session = &server;
  TestClient client;
  // All eight go out before the client has read our SETTINGS (as a client racing the limit).
  std::vector<int32_t> ids;
  for (int i = 0; i < 8; ++i) ids.push_back(client.Request("POST", "/v1/pay", {}, "x"));
  server.Receive(client.TakeOutput());
  Pump(client, server);
  EXPECT_EQ(handler.requests.size(), 5u);
  int refused = 0;
  for (int32_t id : ids) {
    if (client.streams[id].closed && client.streams[id].error_code == NGHTTP2_REFUSED_STREAM) {
      ++refused;
    }
  }
  EXPECT_EQ(refused, 3);  // REFUSED_STREAM: never started, safe to retry
}

TEST(H2Limits, StreamsPastTheAcknowledgedLimitEndTheConnection) {
  H2Limits limits;
  limits.max_streams = 2;
  Raw raw(limits);
  raw.Out();  // our SETTINGS went out; the client acknowledges them
  raw.server.Receive(Frame(NGHTTP2_SETTINGS, NGHTTP2_FLAG_ACK, 0, ""));
  std::string bytes;
  for (int32_t id = 1; id <= 5; id += 2) bytes += raw.Headers(id, PostHead(), /*end=*/false);
  raw.server.Receive(bytes);  // nghttp2 finds this one itself: it shows once the output went
  EXPECT_EQ(GoawayCode(raw.Out()), uint32_t{NGHTTP2_PROTOCOL_ERROR});
  EXPECT_TRUE(raw.server.Finished());
  EXPECT_FALSE(raw.server.Receive(raw.Headers(7, PostHead())));
  EXPECT_EQ(raw.handler.heads.size(), 2u);
}

// The header list counts as the same request's HTTP/1.1 head: over limits.max_header_bytes it
// gets 431, as over HTTP/1.1, and the connection goes on.
TEST(H2Limits, HeaderListOverTheLimitGets431) {
  H2Limits limits;
  limits.max_header_bytes = 4096;
  Recorder handler;
  H2Session server(&handler, limits);
  handler.session = &server;
  TestClient client;
  const int32_t big = client.Request("POST", "/v1/pay", {{"x-big", std::string(5000, 'h')}}, "x");
  const int32_t ok = client.Request("POST", "/v1/pay", {{"x-small", std::string(3000, 'h')}}, "y");
  Pump(client, server);
  EXPECT_EQ(client.streams[big].status, 431);
  EXPECT_NE(client.streams[big].body.find("headers_too_large"), std::string::npos);
  EXPECT_EQ(handler.heads.count(big), 0u);
  EXPECT_EQ(handler.requests.count(ok), 1u);
  EXPECT_FALSE(client.goaway);
}

TEST(H2Limits, BodyOverTheLimitGets413AndTheRestIsDiscarded) {
  Recorder handler;
  H2Session server(&handler, {});
  handler.session = &server;
  handler.plan.max_body = 1000;
  TestClient client;
  const int32_t by_length =
      client.Request("POST", "/v1/pay", {{"content-length", "5000"}}, std::string(5000, 'b'));
  const int32_t by_data = client.Request("POST", "/v1/pay", {}, std::string(50'000, 'b'));
  const int32_t fits = client.Request("POST", "/v1/pay", {}, std::string(1000, 'b'));
  Pump(client, server);
  for (int32_t id : {by_length, by_data}) {
    EXPECT_EQ(client.streams[id].status, 413) << id;
    EXPECT_NE(client.streams[id].body.find("request_too_large"), std::string::npos);
    EXPECT_EQ(handler.requests.count(id), 0u);
    EXPECT_TRUE(client.streams[id].closed);
  }
  EXPECT_EQ(handler.requests[fits].body.size(), 1000u);
  EXPECT_EQ(server.open_streams(), 1u);  // `fits`, waiting for its answer
}

// ----- Floods and bombs: GOAWAY, and the gateway stops reading -----

// HPACK bomb: one 2 KB entry in the dynamic table, named again and again (1 byte each).
TEST(H2Limits, HeaderCompressionBombEndsTheConnection) {
  H2Limits limits;
  limits.max_header_bytes = 16 << 10;
  Raw raw(limits);
  Fields fields = PostHead();
  for (int i = 0; i < 2000; ++i) fields.push_back({"x-bomb", std::string(2000, 'z')});
  const std::string block = raw.encoder.Block(fields);
  ASSERT_LT(block.size(), 16'384u);  // one frame holds 4 MB of decoded headers
  EXPECT_FALSE(raw.server.Receive(Frame(NGHTTP2_HEADERS, NGHTTP2_FLAG_END_HEADERS, 1, block)));
  EXPECT_EQ(GoawayCode(raw.Out()), uint32_t{NGHTTP2_ENHANCE_YOUR_CALM});
  EXPECT_TRUE(raw.handler.heads.empty());
  EXPECT_TRUE(raw.server.Finished());
  EXPECT_NE(raw.server.close_reason().find("compression bomb"), std::string::npos);
}

TEST(H2Limits, ContinuationFloodEndsTheConnection) {
  Raw raw;
  const std::string block = raw.encoder.Block(PostHead());
  std::string bytes = Frame(NGHTTP2_HEADERS, 0, 1, block.substr(0, 1));
  for (int i = 0; i < 100; ++i) bytes += Frame(NGHTTP2_CONTINUATION, 0, 1, "");
  EXPECT_FALSE(raw.server.Receive(bytes));
  EXPECT_EQ(GoawayCode(raw.Out()), uint32_t{NGHTTP2_ENHANCE_YOUR_CALM});
  EXPECT_TRUE(raw.handler.heads.empty());
}

// Rapid reset (CVE-2023-44487): streams opened and reset at once, past a burst.
TEST(H2Limits, RapidResetEndsTheConnection) {
  H2Limits limits;
  limits.reset_burst = 50;
  Raw raw(limits);
  std::string rst(4, '\0');
  rst[3] = NGHTTP2_CANCEL;
  std::string bytes;
  for (int32_t id = 1; id < 2 * 500; id += 2) {
    bytes += raw.Headers(id, PostHead(), /*end=*/false) + Frame(NGHTTP2_RST_STREAM, 0, id, rst);
  }
  raw.server.Receive(bytes);
  EXPECT_NE(GoawayCode(raw.Out()), 0xffffffffu);  // GOAWAY sent
  // Only the burst ever reached the gateway: the session stopped reading at the first reset
  // past it.
  EXPECT_LE(raw.handler.heads.size(), 51u);
  EXPECT_TRUE(raw.server.Finished());
}

TEST(H2Limits, PingFloodEndsTheConnection) {
  H2Limits limits;
  limits.control_burst = 100;
  limits.control_rate = 10;
  Raw raw(limits);
  std::string bytes;
  for (int i = 0; i < 90; ++i) bytes += Frame(NGHTTP2_PING, 0, 0, std::string(8, 'p'));
  EXPECT_TRUE(raw.server.Receive(bytes));
  raw.now_ms += 2'000;  // 20 more allowed after 2 s at 10/s
  EXPECT_TRUE(raw.server.Receive(bytes.substr(0, 17 * 20)));
  EXPECT_FALSE(raw.server.Receive(bytes.substr(0, 17 * 40)));
  EXPECT_EQ(GoawayCode(raw.Out()), uint32_t{NGHTTP2_ENHANCE_YOUR_CALM});
  EXPECT_TRUE(raw.server.Finished());
}

TEST(H2Limits, SettingsFloodEndsTheConnection) {
  H2Limits limits;
  limits.control_burst = 100;
  Raw raw(limits);
  std::string bytes;
  for (int i = 0; i < 200; ++i) bytes += Frame(NGHTTP2_SETTINGS, 0, 0, "");
  EXPECT_FALSE(raw.server.Receive(bytes));
  EXPECT_EQ(GoawayCode(raw.Out()), uint32_t{NGHTTP2_ENHANCE_YOUR_CALM});
}

TEST(H2Limits, EmptyDataFloodEndsTheConnection) {
  H2Limits limits;
  limits.control_burst = 100;
  Raw raw(limits);
  raw.handler.plan.mode = H2BodyPlan::Mode::kStream;
  std::string bytes = raw.Headers(1, PostHead(), /*end=*/false);
  for (int i = 0; i < 200; ++i) bytes += Frame(NGHTTP2_DATA, 0, 1, "");
  EXPECT_FALSE(raw.server.Receive(bytes));
  EXPECT_EQ(GoawayCode(raw.Out()), uint32_t{NGHTTP2_ENHANCE_YOUR_CALM});
}

// A client that sends PINGs and never reads: the acknowledgements pile up inside the session
// (the caller takes no output while the socket is full) until it counts a flood and gives up.
TEST(H2Limits, ClientThatNeverReadsIsAFlood) {
  H2Limits limits;
  limits.max_outbound_ack = 100;
  limits.control_burst = 1'000'000;
  Recorder handler;
  H2Session server(&handler, limits);
  std::string bytes = h2test::Preface();
  for (int i = 0; i < 500; ++i) bytes += Frame(NGHTTP2_PING, 0, 0, std::string(8, 'p'));
  EXPECT_FALSE(server.Receive(bytes));  // no PullOutput: the client's socket is full
  EXPECT_TRUE(server.Finished());
}

// ----- Smuggling shapes over HTTP/2: none reaches the gateway -----

// Content-Length against the DATA received: fewer or more bytes reset the stream before the
// request is handed on, so a body that disagrees with its length is never forwarded.
TEST(H2Smuggling, ContentLengthDisagreeingWithDataResetsTheStream) {
  Raw raw;
  Fields shorter = PostHead();
  shorter.push_back({"content-length", "10"});
  Fields longer = PostHead();
  longer.push_back({"content-length", "3"});
  // One statement per header block: the encoder's table follows the order they are sent in.
  std::string bytes = raw.Headers(1, shorter, false);
  bytes += Frame(NGHTTP2_DATA, NGHTTP2_FLAG_END_STREAM, 1, "12345");
  bytes += raw.Headers(3, longer, false);
  bytes += Frame(NGHTTP2_DATA, NGHTTP2_FLAG_END_STREAM, 3, "12345");
  EXPECT_TRUE(raw.server.Receive(bytes));
  const auto frames = raw.Out();
  for (int32_t id : {1, 3}) {
    const h2test::SeenFrame* rst = FindFrame(frames, NGHTTP2_RST_STREAM, id);
    ASSERT_NE(rst, nullptr) << id;
    EXPECT_EQ(rst->code, uint32_t{NGHTTP2_PROTOCOL_ERROR});
    EXPECT_EQ(raw.handler.requests.count(id), 0u);
  }
}

// Connection-specific fields (RFC 9113 §8.2.2), pseudo-header misuse and upper-case names make
// the request malformed: the stream is reset and nothing reaches the gateway.
TEST(H2Smuggling, MalformedHeaderListsResetTheStream) {
  const std::vector<Fields> bad = {
      {{"transfer-encoding", "chunked"}},
      {{"connection", "keep-alive"}},
      {{"keep-alive", "5"}},
      {{"upgrade", "h2c"}},
      {{"proxy-connection", "x"}},
      {{"te", "gzip"}},
      {{"X-Upper", "1"}},
      {{":path", "/twice"}},
      {{"content-length", "1"}, {"content-length", "2"}},
      {{"x-ok", "1"}, {":method", "GET"}},  // a pseudo-header after a regular one
  };
  Raw raw;
  int32_t id = 1;
  std::string bytes;
  for (const Fields& extra : bad) {
    Fields fields = PostHead();
    fields.insert(fields.end(), extra.begin(), extra.end());
    bytes += raw.Headers(id, fields);
    id += 2;
  }
  Fields no_path = {{":method", "POST"}, {":scheme", "https"}, {":authority", "a"}};
  bytes += raw.Headers(id, no_path);
  EXPECT_TRUE(raw.server.Receive(bytes));
  const auto frames = raw.Out();
  for (int32_t s = 1; s <= id; s += 2) {
    const h2test::SeenFrame* rst = FindFrame(frames, NGHTTP2_RST_STREAM, s);
    ASSERT_NE(rst, nullptr) << "stream " << s;
    EXPECT_EQ(rst->code, uint32_t{NGHTTP2_PROTOCOL_ERROR}) << "stream " << s;
  }
  EXPECT_TRUE(raw.handler.heads.empty());
  EXPECT_TRUE(raw.handler.rejected.empty());
  EXPECT_EQ(GoawayCode(frames), 0xffffffffu);  // stream errors: the connection goes on
}

// What nghttp2 lets through but the gateway refuses, with 400 as over HTTP/1.1.
TEST(H2Smuggling, HostAgainstAuthorityAndConnectGet400) {
  Raw raw;
  Fields other_host = PostHead();
  other_host.push_back({"host", "evil.test"});
  Fields same_host = PostHead();
  same_host.push_back({"host", "API.test"});
  Fields connect = {{":method", "CONNECT"}, {":authority", "upstream:443"}};
  std::string bytes = raw.Headers(1, other_host);
  bytes += raw.Headers(3, connect);
  bytes += raw.Headers(5, same_host);
  EXPECT_TRUE(raw.server.Receive(bytes));
  EXPECT_EQ(raw.handler.rejected[1], ErrorCode::kBadRequest);
  EXPECT_EQ(raw.handler.rejected[3], ErrorCode::kBadRequest);
  ASSERT_EQ(raw.handler.requests.count(5), 1u);
  EXPECT_EQ(CountHeader(raw.handler.requests[5].headers, "Host"), 1);
  const auto frames = raw.Out();
  EXPECT_NE(FindFrame(frames, NGHTTP2_HEADERS, 1), nullptr);  // the 400 went out
  EXPECT_NE(FindFrame(frames, NGHTTP2_HEADERS, 3), nullptr);
}

TEST(H2Smuggling, NotThePrefaceEndsTheSession) {
  Recorder handler;
  H2Session server(&handler, {});
  EXPECT_FALSE(server.Receive("POST / HTTP/1.1\r\nHost: a\r\n\r\n"));
  EXPECT_TRUE(handler.heads.empty());
}

}  // namespace
}  // namespace idemgate
