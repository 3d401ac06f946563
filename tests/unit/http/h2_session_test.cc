// SPDX-License-Identifier: Apache-2.0
// H2Session driven by nghttp2's own client, in process: a stream's request as our Request,
// answers as HTTP/2 (H3), flow control both ways (H4), a reset after the request (detach), and
// GOAWAY at shutdown (H6). The limits and attacks are in h2_hardening_test.cc.
#include <gtest/gtest.h>

#include <string>

#include "proxy/http/http_parser.h"
#include "proxy/policy/guard.h"
#include "tests/unit/http/h2_test_peer.h"

namespace idemgate {
namespace {

using h2test::Fields;
using h2test::Pump;
using h2test::Recorder;
using h2test::TestClient;

struct Pair {
  explicit Pair(H2Limits limits = {}, uint32_t client_window = 65535, bool auto_window = true)
      : client(client_window, auto_window), server(&handler, std::move(limits)) {
    handler.session = &server;
  }
  Recorder handler;
  TestClient client;
  H2Session server;
};

StoredResponse Created(std::string body) {
  StoredResponse r;
  r.status = 201;
  r.reason = "Created";
  r.headers = {{"Content-Type", "application/json"}};
  r.body = std::move(body);
  return r;
}

TEST(H2Session, RequestHeadMapsPseudoHeaders) {
  Pair p;
  const int32_t id = p.client.Request("POST", "/v1/pay?x=1",
                                      {{"idempotency-key", "k1"},
                                       {"authorization", "Bearer t"},
                                       {"cookie", "a=1"},
                                       {"cookie", "b=2"},
                                       {"content-length", "9"}},
                                      "{\"a\":10}\n");
  Pump(p.client, p.server);
  ASSERT_EQ(p.handler.requests.count(id), 1u);
  const Request& r = p.handler.requests[id];
  EXPECT_EQ(r.method, "POST");
  EXPECT_EQ(r.target, "/v1/pay?x=1");
  EXPECT_EQ(r.Path(), "/v1/pay");
  ASSERT_FALSE(r.headers.empty());
  EXPECT_EQ(r.headers[0].name, "host");  // :authority, first, as HTTP/1.1 sends Host
  EXPECT_EQ(r.headers[0].value, "api.test");
  EXPECT_EQ(*FindHeader(r.headers, "Idempotency-Key"), "k1");
  EXPECT_EQ(*FindHeader(r.headers, "Cookie"), "a=1; b=2");  // RFC 9113 §8.2.3
  EXPECT_EQ(CountHeader(r.headers, "Cookie"), 1);
  EXPECT_EQ(r.body, "{\"a\":10}\n");
  EXPECT_EQ(r.content_length, 9);
  EXPECT_EQ(r.http_major, 2);
  EXPECT_FALSE(r.chunked);
}

// H2: the fingerprint does not depend on the protocol: the same request over HTTP/1.1 and over
// HTTP/2 is the same request (and a retry over the other one replays).
TEST(H2Session, FingerprintIsTheSameAsOverHttp11) {
  Pair p;
  const int32_t id = p.client.Request(
      "POST", "/v1/pay", {{"idempotency-key", "k1"}, {"x-tenant", "acme"}}, "{\"amount\":10}");
  Pump(p.client, p.server);
  ASSERT_EQ(p.handler.requests.count(id), 1u);
  RequestParser parser(1 << 20, 64 << 10);
  const std::string h1 =
      "POST /v1/pay HTTP/1.1\r\nHost: api.test\r\nIdempotency-Key: k1\r\nX-Tenant: acme\r\n"
      "Content-Length: 13\r\n\r\n{\"amount\":10}";
  parser.Feed(h1.data(), h1.size());
  ASSERT_TRUE(parser.message_complete()) << parser.error_detail();
  const std::vector<std::string> fingerprinted = {"x-tenant"};
  EXPECT_EQ(ComputeFingerprint(p.handler.requests[id], fingerprinted),
            ComputeFingerprint(parser.request(), fingerprinted));
  const Request other = [&] {
    Request r = p.handler.requests[id];
    r.body = "{\"amount\":11}";
    return r;
  }();
  EXPECT_NE(ComputeFingerprint(other, fingerprinted),
            ComputeFingerprint(parser.request(), fingerprinted));
}

// H3: lower-case names; Connection and what it lists, Keep-Alive, Proxy-Connection,
// Transfer-Encoding, Upgrade left out; every other stored header and every body byte as stored.
TEST(H2Session, AnswerLeavesOutWhatHttp2Forbids) {
  Pair p;
  const int32_t id = p.client.Request("POST", "/v1/pay", {}, "x");
  Pump(p.client, p.server);
  StoredResponse r = Created(std::string(100'000, 'b'));
  r.headers = {{"Content-Type", "application/json"},
               {"Connection", "X-Secret, close"},
               {"X-Secret", "s"},
               {"Keep-Alive", "timeout=5"},
               {"Proxy-Connection", "x"},
               {"Transfer-Encoding", "chunked"},
               {"Upgrade", "h2c"},
               {"X-Request-Id", "old"},
               {"Set-Cookie", "a=1"},
               {"Set-Cookie", "b=2"}};
  ASSERT_TRUE(p.handler.Answer(id, r, /*replayed=*/true, "Age: 3\r\n"));
  Pump(p.client, p.server);
  const h2test::ClientStream& s = p.client.streams[id];
  ASSERT_TRUE(s.closed);
  EXPECT_EQ(s.error_code, 0u);
  EXPECT_EQ(s.status, 201);
  const Fields want = {{"content-type", "application/json"},
                       {"set-cookie", "a=1"},
                       {"set-cookie", "b=2"},
                       {"x-request-id", "req-1"},
                       {"idempotent-replayed", "true"},
                       {"age", "3"},
                       {"content-length", "100000"}};
  EXPECT_EQ(s.headers, want);
  EXPECT_EQ(s.body, r.body);
  ASSERT_EQ(p.handler.closed.count(id), 1u);
  EXPECT_EQ(p.handler.closed[id].first, H2StreamEnd::kAnswered);
}

TEST(H2Fields, HeadAnd204CarryNoBody) {
  bool send_body = true;
  StoredResponse head = Created("");
  head.headers.push_back({"Content-Length", "42"});  // a HEAD's answer keeps the upstream's
  H2Fields f = H2AnswerFields(head, false, {}, /*head_request=*/true, "r", &send_body);
  EXPECT_FALSE(send_body);
  EXPECT_EQ(f.back(), (H2Field{"x-request-id", "r"}));
  EXPECT_EQ(f[2], (H2Field{"content-length", "42"}));
  StoredResponse none = Created("ignored");
  none.status = 204;
  f = H2AnswerFields(none, false, {}, false, "", &send_body);
  EXPECT_FALSE(send_body);
  for (const H2Field& field : f) EXPECT_NE(field.name, "content-length");
}

// A HEAD request's answer: headers only, the stream ends on them.
TEST(H2Session, HeadAnswerEndsOnItsHeaders) {
  Pair p;
  const int32_t id = p.client.Request("HEAD", "/v1/thing");
  Pump(p.client, p.server);
  ASSERT_TRUE(p.handler.Answer(id, Created("body"), false, {}, /*head=*/true));
  Pump(p.client, p.server);
  EXPECT_TRUE(p.client.streams[id].closed);
  EXPECT_EQ(p.client.streams[id].body, "");
  EXPECT_EQ(p.client.streams[id].Header("content-length"), "4");
}

// H4, client to gateway: a streamed body is acknowledged only as the caller forwards it, so a
// stream whose upstream is slow holds at most its window, and all streams together at most the
// connection window.
TEST(H2Session, StreamedBodyIsHeldToTheWindowUntilForwarded) {
  H2Limits limits;
  limits.stream_window = 16 << 10;
  limits.connection_window = 64 << 10;
  Pair p(limits);
  p.handler.plan.mode = H2BodyPlan::Mode::kStream;
  const std::string body(200'000, 'u');
  const int32_t id = p.client.Request("PUT", "/upload", {}, body);
  Pump(p.client, p.server);
  ASSERT_EQ(p.handler.heads.count(id), 1u);
  // The first window (65,535 until the client takes our SETTINGS, then 16 KiB).
  EXPECT_LE(p.handler.streamed[id].size(), 65'535u);
  EXPECT_GT(p.client.UploadLeft(id), 100'000u);
  for (int i = 0; i < 100 && p.handler.ended.count(id) == 0; ++i) {
    p.server.Consume(id, p.handler.streamed[id].size());
    Pump(p.client, p.server);
  }
  EXPECT_EQ(p.handler.streamed[id], body);
  EXPECT_EQ(p.handler.ended.count(id), 1u);
}

TEST(H2Session, UnforwardedStreamsTogetherHoldAtMostTheConnectionWindow) {
  H2Limits limits;
  limits.stream_window = 64 << 10;
  limits.connection_window = 128 << 10;
  Pair p(limits);
  p.handler.plan.mode = H2BodyPlan::Mode::kStream;
  // Settle SETTINGS first, so every stream starts with our windows.
  Pump(p.client, p.server);
  std::vector<int32_t> ids;
  for (int i = 0; i < 10; ++i)
    ids.push_back(p.client.Request("PUT", "/u", {}, std::string(60'000, 'x')));
  Pump(p.client, p.server);
  size_t held = 0;
  for (int32_t id : ids) held += p.handler.streamed[id].size();
  // nghttp2 lets the connection window grow by what the client was owed at the start (65,535).
  EXPECT_LE(held, (128u << 10) + 65'535u);
  EXPECT_GT(held, 0u);
  // Forwarding one stream's bytes lets the others go on.
  for (int round = 0; round < 50; ++round) {
    for (int32_t id : ids) p.server.Consume(id, 1 << 20);
    Pump(p.client, p.server);
  }
  for (int32_t id : ids) EXPECT_EQ(p.handler.streamed[id].size(), 60'000u) << id;
}

// H4, gateway to client: a client that does not read one stream's answer holds back only that
// stream; the caller sees the bytes queued and hears when they drained.
TEST(H2Session, UnreadStreamDoesNotHoldBackTheOthers) {
  Pair p({}, /*client_window=*/16 << 10, /*auto_window=*/false);
  p.handler.plan.mode = H2BodyPlan::Mode::kBuffer;
  const int32_t slow = p.client.Request("GET", "/big");
  const int32_t fast = p.client.Request("GET", "/small");
  Pump(p.client, p.server);
  StoredResponse head = Created("");
  ASSERT_TRUE(p.server.SubmitResponseHead(slow, H2StreamedAnswerFields(head, -1, "r1"), false));
  ASSERT_TRUE(p.server.AppendBody(slow, std::string(100'000, 's')));
  ASSERT_TRUE(p.server.EndBody(slow));
  ASSERT_TRUE(p.handler.Answer(fast, Created("small")));
  Pump(p.client, p.server);
  EXPECT_TRUE(p.client.streams[fast].closed);
  EXPECT_EQ(p.client.streams[fast].body, "small");
  EXPECT_EQ(p.client.streams[slow].body.size(), 16u << 10);
  EXPECT_EQ(p.server.BufferedBody(slow), 100'000u - (16u << 10));
  EXPECT_TRUE(p.handler.drained.empty());
  for (int i = 0; i < 20 && !p.client.streams[slow].closed; ++i) {
    p.client.Read(slow, p.client.streams[slow].body.size());
    Pump(p.client, p.server);
  }
  EXPECT_EQ(p.client.streams[slow].body, std::string(100'000, 's'));
  EXPECT_EQ(p.handler.drained, std::vector<int32_t>{slow});
}

// A handler that, when a streamed answer drains, queues the next piece and pulls the output
// at once (as a relay resuming its upstream does through H2Conn): every byte reaches the
// client once and in order. (Pulling inside the drained call used to reuse the bytes of the
// send it came from, which the nested send had overwritten.)
struct Refiller : Recorder {
  std::string* wire = nullptr;
  int32_t stream = 0;
  int pieces_left = 0;
  std::string sent;
  void OnResponseDrained(int32_t id) override {
    Recorder::OnResponseDrained(id);
    if (id != stream || pieces_left == 0) return;
    --pieces_left;
    const std::string piece(40'000, static_cast<char>('a' + pieces_left % 26));
    sent += piece;
    session->AppendBody(id, piece);
    if (pieces_left == 0) session->EndBody(id);
    for (std::string_view piece = session->PullOutput(); !piece.empty();
         piece = session->PullOutput()) {
      wire->append(piece);  // each piece as it comes, as H2Conn adds it to the socket
    }
  }
};

TEST(H2Session, DrainedHandlerThatPullsOutputKeepsTheBytesInOrder) {
  Refiller handler;
  TestClient client;
  H2Session server(&handler, {});
  handler.session = &server;
  const int32_t id = client.Request("GET", "/big");
  Pump(client, server);
  ASSERT_TRUE(server.SubmitResponseHead(id, H2StreamedAnswerFields(Created(""), -1, "r"), false));
  handler.sent = std::string(40'000, 'z');
  ASSERT_TRUE(server.AppendBody(id, handler.sent));
  handler.stream = id;
  handler.pieces_left = 20;
  for (int i = 0; i < 1000 && !client.streams[id].closed; ++i) {
    std::string wire;
    handler.wire = &wire;
    const std::string up = client.TakeOutput();
    if (!up.empty()) server.Receive(up);
    for (std::string_view piece = server.PullOutput(); !piece.empty();
         piece = server.PullOutput()) {
      wire.append(piece);
    }
    client.Feed(wire);
  }
  EXPECT_TRUE(client.streams[id].closed);
  EXPECT_EQ(client.streams[id].error_code, 0u);
  EXPECT_EQ(handler.pieces_left, 0);
  const std::string& got = client.streams[id].body;
  size_t at = 0;
  while (at < got.size() && at < handler.sent.size() && got[at] == handler.sent[at]) ++at;
  EXPECT_EQ(at, handler.sent.size()) << "first difference at " << at << " of " << got.size()
                                     << ": " << got.substr(at, 8) << " vs "
                                     << handler.sent.substr(at, 8);
}

// A streamed answer whose pieces come later (the upstream's) waits for them, then ends.
TEST(H2Session, StreamedAnswerWaitsForItsPieces) {
  Pair p;
  const int32_t id = p.client.Request("GET", "/stream");
  Pump(p.client, p.server);
  ASSERT_TRUE(p.server.SubmitResponseHead(id, H2StreamedAnswerFields(Created(""), 6, "r"), false));
  Pump(p.client, p.server);
  EXPECT_EQ(p.client.streams[id].status, 201);
  EXPECT_EQ(p.client.streams[id].Header("content-length"), "6");
  ASSERT_TRUE(p.server.AppendBody(id, "abc"));
  Pump(p.client, p.server);
  EXPECT_EQ(p.client.streams[id].body, "abc");
  EXPECT_FALSE(p.client.streams[id].closed);
  ASSERT_TRUE(p.server.AppendBody(id, "def"));
  ASSERT_TRUE(p.server.EndBody(id));
  Pump(p.client, p.server);
  EXPECT_TRUE(p.client.streams[id].closed);
  EXPECT_EQ(p.client.streams[id].body, "abcdef");
}

// H4: a stream reset after its request was taken is reported (the exchange detaches and still
// stores its result); what is submitted for it afterwards goes nowhere.
TEST(H2Session, ResetAfterTheRequestIsReportedAndAnswersGoNowhere) {
  Pair p;
  const int32_t id = p.client.Request("POST", "/v1/pay", {{"idempotency-key", "k"}}, "x");
  const int32_t other = p.client.Request("POST", "/v1/pay", {{"idempotency-key", "k2"}}, "y");
  Pump(p.client, p.server);
  ASSERT_EQ(p.handler.requests.count(id), 1u);
  p.client.Reset(id, NGHTTP2_CANCEL);
  Pump(p.client, p.server);
  ASSERT_EQ(p.handler.closed.count(id), 1u);
  EXPECT_EQ(p.handler.closed[id].first, H2StreamEnd::kReset);
  EXPECT_EQ(p.handler.closed[id].second, uint32_t{NGHTTP2_CANCEL});
  EXPECT_FALSE(p.handler.Answer(id, Created("late")));
  ASSERT_TRUE(p.handler.Answer(other, Created("ok")));  // the other stream is untouched
  Pump(p.client, p.server);
  EXPECT_EQ(p.client.streams[other].body, "ok");
  EXPECT_EQ(p.server.open_streams(), 0u);
}

// An answer before the request's end (a 408 for a stream that never ends, an early refusal):
// the stream is then reset with NO_ERROR, as RFC 9113 §8.1 says, and the client has the answer.
TEST(H2Session, AnswerBeforeTheRequestEndsResetsTheRest) {
  Pair p;
  const int32_t id = p.client.Request("POST", "/v1/pay", {}, "part", /*open=*/true);
  Pump(p.client, p.server);
  ASSERT_EQ(p.handler.heads.count(id), 1u);
  ASSERT_TRUE(p.handler.Answer(id, MakeErrorResponse(ErrorCode::kRequestTimeout)));
  Pump(p.client, p.server);
  EXPECT_EQ(p.client.streams[id].status, 408);
  EXPECT_TRUE(p.client.streams[id].closed);
  EXPECT_EQ(p.client.streams[id].error_code, uint32_t{NGHTTP2_NO_ERROR});
  EXPECT_EQ(p.handler.closed[id].first, H2StreamEnd::kAnswered);
  EXPECT_EQ(p.server.open_streams(), 0u);
}

// H6: GOAWAY names the last stream taken; a later one is never started (safe to retry); the
// open one finishes, then the session is done.
TEST(H2Session, GracefulShutdownFinishesOpenStreamsAndStartsNoNewOne) {
  Pair p;
  const int32_t first = p.client.Request("POST", "/v1/pay", {}, "a");
  Pump(p.client, p.server);
  p.server.StartGracefulShutdown();
  Pump(p.client, p.server);
  EXPECT_TRUE(p.client.goaway);
  EXPECT_EQ(p.client.goaway_code, uint32_t{NGHTTP2_NO_ERROR});
  EXPECT_EQ(p.client.goaway_last_stream, first);
  EXPECT_FALSE(p.server.Finished());
  ASSERT_TRUE(p.handler.Answer(first, Created("done")));
  Pump(p.client, p.server);
  EXPECT_EQ(p.client.streams[first].body, "done");
  EXPECT_TRUE(p.server.Finished());
  EXPECT_EQ(p.handler.heads.size(), 1u);
}

TEST(H2Session, PrefaceIsRecognizedFromItsFirstBytes) {
  EXPECT_EQ(MatchH2Preface("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n...."), H2Preface::kYes);
  EXPECT_EQ(MatchH2Preface("PRI * HT"), H2Preface::kMaybe);
  EXPECT_EQ(MatchH2Preface(""), H2Preface::kMaybe);
  EXPECT_EQ(MatchH2Preface("POST /v1 HTTP/1.1\r\n"), H2Preface::kNo);
  EXPECT_EQ(MatchH2Preface("PRI * HTTP/1.1"), H2Preface::kNo);
}

}  // namespace
}  // namespace idemgate
