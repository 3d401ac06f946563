// SPDX-License-Identifier: Apache-2.0
// The passthrough relay driven in-process through its seam (a fake ClientEnv and a recording
// StreamSink, no Worker, no upstream process): what goes upstream and when, what the client side
// is handed, back-pressure both ways, the error answers, and the one report each request makes.
#include "proxy/conn/passthrough_relay.h"

#include <gtest/gtest.h>

#include "tests/unit/conn/conn_fakes.h"

namespace idemgate::test {
namespace {

class RelayTest : public ::testing::Test {
 protected:
  RelayTest() : relay_(&env_, &sink_, client_ip_) {
    env_.config->upstream.addr = HostPort{"127.0.0.1", 8080};
    env_.config->upstream.response_timeout_ms = 1234;
  }

  Request Head(std::string method = "POST", std::string target = "/v1/events?x=1") {
    Request r;
    r.method = std::move(method);
    r.target = std::move(target);
    r.headers.emplace_back("Host", "api.example");
    r.headers.emplace_back("Content-Length", "5");
    r.content_length = 5;
    return r;
  }
  Response UpstreamHead(int status, int64_t length) {
    Response r;
    r.status = status;
    r.reason = "OK";
    r.content_length = length;
    if (length >= 0) r.headers.emplace_back("Content-Length", std::to_string(length));
    return r;
  }
  void Finish(FakeStreamCall& call, UpstreamError error = UpstreamError::kNone) {
    UpstreamResult result;
    result.error = error;
    result.detail = error == UpstreamError::kNone ? "" : "reset by peer";
    UpstreamCallback done = std::move(call.done);
    done(std::move(result));
  }

  FakeClientEnv env_;
  RecordingStreamSink sink_;
  const std::string client_ip_ = "192.0.2.7";  // the relay keeps a reference
  PassthroughRelay relay_;
};

TEST_F(RelayTest, HeadAndEarlyBodyGoInOneWriteThenTheAnswerStreamsAndIsReportedOnce) {
  Request head = Head();
  relay_.Begin(head, *env_.config, false);
  relay_.RequestBody("he");  // came with the head: waits for the call
  relay_.StartCall();
  ASSERT_EQ(env_.calls.size(), 1u);
  FakeStreamCall& call = env_.call();
  EXPECT_EQ(call.head.substr(0, 26), "POST /v1/events?x=1 HTTP/1");
  EXPECT_NE(call.head.find("X-Forwarded-For: 192.0.2.7\r\n"), std::string::npos);
  EXPECT_EQ(call.head.substr(call.head.size() - 6), "\r\n\r\nhe");
  EXPECT_EQ(call.limits.response_timeout_ms, 1234);
  EXPECT_EQ(call.limits.max_response_body, UINT64_MAX);  // relayed, not stored
  relay_.RequestBody("llo");
  relay_.RequestEnd();
  EXPECT_EQ(call.written, "llo");
  EXPECT_TRUE(call.ended);

  env_.now_us += 5'000;
  call.receiver->OnResponseHead(UpstreamHead(201, 4));
  ASSERT_EQ(sink_.heads.size(), 1u);
  EXPECT_EQ(sink_.heads[0].status, 201);
  EXPECT_EQ(sink_.head_length, 4);
  EXPECT_EQ(sink_.head_request_id.size(), 32u);  // a new X-Request-Id, as upstream got
  EXPECT_NE(call.head.find("X-Request-Id: " + sink_.head_request_id), std::string::npos);
  call.receiver->OnResponseBody("da");
  call.receiver->OnResponseFlush();
  call.receiver->OnResponseBody("ta");
  EXPECT_TRUE(env_.samples.empty());  // counted when it ends
  Finish(call);

  EXPECT_EQ(sink_.body, "data");
  EXPECT_EQ(sink_.flushes, 1);
  EXPECT_EQ(sink_.ends, std::vector<bool>{true});
  EXPECT_TRUE(sink_.end_request_complete);
  ASSERT_EQ(env_.samples.size(), 1u);
  EXPECT_EQ(env_.samples[0].outcome, Outcome::kPassthrough);
  EXPECT_EQ(env_.samples[0].upstream_status, 201);
  EXPECT_EQ(env_.samples[0].upstream_us, 5'000);
  const FakeClientEnv::Entry& e = env_.entries.at(0);
  EXPECT_EQ(e.method, "POST");
  EXPECT_EQ(e.path, "/v1/events");
  EXPECT_EQ(e.outcome, "passthrough");
  EXPECT_EQ(e.status, 201);
  EXPECT_EQ(e.bytes_out, 4u);
  EXPECT_EQ(e.request_id, sink_.head_request_id);
  EXPECT_FALSE(e.client_closed);
  relay_.ClientGone();  // after its end: nothing more is counted
  EXPECT_EQ(env_.samples.size(), 1u);
}

TEST_F(RelayTest, AChunkedRequestBodyIsChunkedUpstreamAndEndsWithTheLastChunk) {
  Request head = Head();
  head.chunked = true;
  relay_.Begin(head, *env_.config, false);
  relay_.StartCall();
  relay_.RequestBody("abc");
  relay_.RequestBody("");  // an empty piece would end the body early: dropped
  relay_.RequestBody("0123456789abcdef");
  relay_.RequestEnd();
  EXPECT_EQ(env_.call().written, "3\r\nabc\r\n10\r\n0123456789abcdef\r\n0\r\n\r\n");
  EXPECT_TRUE(env_.call().ended);
}

TEST_F(RelayTest, ASlowUpstreamPausesTheRequestBodyUntilItDrained) {
  Request head = Head();
  relay_.Begin(head, *env_.config, false);
  relay_.StartCall();
  FakeStreamCall& call = env_.call();
  call.unsent = kRelayHigh;
  relay_.CheckUpstreamBacklog();
  EXPECT_FALSE(sink_.request_paused);  // at the mark, not past it
  call.unsent = kRelayHigh + 1;
  relay_.CheckUpstreamBacklog();
  EXPECT_TRUE(sink_.request_paused);
  EXPECT_TRUE(relay_.request_paused());
  call.unsent = 0;
  call.receiver->OnRequestDrained();
  EXPECT_FALSE(sink_.request_paused);
  EXPECT_EQ(sink_.reads, 1);          // what waited in the buffer is read now
  call.receiver->OnRequestDrained();  // not paused: nothing to do
  EXPECT_EQ(sink_.reads, 1);
}

TEST_F(RelayTest, ASlowClientPausesTheUpstreamResponseUntilItCaughtUp) {
  Request head = Head();
  relay_.Begin(head, *env_.config, false);
  relay_.StartCall();
  relay_.PauseResponse(true);
  EXPECT_TRUE(env_.call().response_paused);
  EXPECT_TRUE(relay_.response_paused());
  relay_.PauseResponse(false);
  EXPECT_FALSE(env_.call().response_paused);
}

TEST_F(RelayTest, AnUnreachableUpstreamIsTheGatewaysOwn502AndTheRequestIsReportedWithIt) {
  Request head = Head();
  relay_.Begin(head, *env_.config, false);
  relay_.StartCall();
  env_.call().unsent = kRelayHigh + 1;
  relay_.CheckUpstreamBacklog();
  Finish(env_.call(), UpstreamError::kUnavailable);
  EXPECT_FALSE(sink_.request_paused);  // the rest of the body is read and dropped
  ASSERT_EQ(sink_.errors.size(), 1u);
  EXPECT_EQ(sink_.errors[0]->status, 502);
  EXPECT_NE(sink_.errors[0]->body.find("upstream_unavailable"), std::string::npos);
  EXPECT_FALSE(sink_.error_request_complete);  // the body was not all read: no reuse
  EXPECT_TRUE(sink_.heads.empty());
  ASSERT_EQ(env_.samples.size(), 1u);
  EXPECT_EQ(env_.samples[0].error, ErrorCode::kUpstreamUnavailable);
  EXPECT_EQ(env_.entries.at(0).status, 502);
  EXPECT_EQ(env_.entries.at(0).error_detail, "reset by peer");
}

TEST_F(RelayTest, AFailureAfterTheHeadCutsTheStreamInsteadOfAnsweringAgain) {
  Request head = Head("GET", "/feed");
  relay_.Begin(head, *env_.config, false);
  relay_.RequestEnd();
  relay_.StartCall();
  env_.call().receiver->OnResponseHead(UpstreamHead(200, -1));
  EXPECT_EQ(sink_.head_length, -1);  // not known ahead: the sink frames it
  env_.call().receiver->OnResponseBody("event: 1\n\n");
  Finish(env_.call(), UpstreamError::kFailed);
  EXPECT_EQ(sink_.ends, std::vector<bool>{false});
  EXPECT_TRUE(sink_.errors.empty());
  ASSERT_EQ(env_.samples.size(), 1u);
  EXPECT_EQ(env_.samples[0].upstream_error, UpstreamError::kFailed);
  EXPECT_FALSE(env_.samples[0].error.has_value());
}

TEST_F(RelayTest, AGroupTheWorkersDoNotHaveIs502WithNothingSent) {
  env_.config->upstream_group = "billing";
  env_.missing_group = true;
  Request head = Head();
  relay_.Begin(head, *env_.config, false);
  relay_.RequestEnd();
  relay_.StartCall();
  ASSERT_EQ(sink_.errors.size(), 1u);
  EXPECT_EQ(sink_.errors[0]->status, 502);
  EXPECT_TRUE(sink_.error_request_complete);
  EXPECT_NE(env_.entries.at(0).error_detail.find("'billing'"), std::string::npos);
  relay_.RequestBody("more");  // answered: dropped
}

TEST_F(RelayTest, AClientGoneMidAnswerCutsTheCallAndIsLoggedAsClosedByTheClient) {
  Request head = Head();
  relay_.Begin(head, *env_.config, false);
  relay_.StartCall();
  env_.call().receiver->OnResponseHead(UpstreamHead(200, 10));
  relay_.ClientGone();
  EXPECT_TRUE(env_.call().cancelled);
  ASSERT_EQ(env_.entries.size(), 1u);
  EXPECT_TRUE(env_.entries[0].client_closed);
  EXPECT_FALSE(relay_.calling());
}

TEST_F(RelayTest, ABrokenRequestBodyCutsTheCallAndLeavesTheAnswerToTheCaller) {
  Request head = Head();
  relay_.Begin(head, *env_.config, false);
  relay_.StartCall();
  EXPECT_FALSE(relay_.Abort(ErrorCode::kBadRequest, "bad chunk"));  // nothing went out yet
  EXPECT_TRUE(env_.call().cancelled);
  EXPECT_TRUE(env_.samples.empty());  // the caller's error answer is what is counted
  relay_.ClientGone();
  EXPECT_TRUE(env_.samples.empty());

  Request again = Head();
  relay_.Begin(again, *env_.config, false);
  relay_.StartCall();
  env_.call(1).receiver->OnResponseHead(UpstreamHead(200, 10));
  EXPECT_TRUE(relay_.Abort(ErrorCode::kBadRequest, "bad chunk"));  // the head went: cut
  ASSERT_EQ(env_.samples.size(), 1u);
  EXPECT_EQ(env_.samples[0].error, ErrorCode::kBadRequest);
}

TEST_F(RelayTest, AHeadRequestsAnswerKeepsItsLengthWithoutABody) {
  Request head = Head("HEAD", "/");
  relay_.Begin(head, *env_.config, false);
  relay_.RequestEnd();
  relay_.StartCall();
  env_.call().receiver->OnResponseHead(UpstreamHead(200, 99));
  ASSERT_EQ(sink_.heads.size(), 1u);
  EXPECT_EQ(sink_.head_length, 99);
  Finish(env_.call());
  EXPECT_EQ(env_.entries.at(0).method, "HEAD");
}

}  // namespace
}  // namespace idemgate::test
