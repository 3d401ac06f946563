// FakeUpstream: every programmable behaviour, observed through TestClient.
#include <gtest/gtest.h>

#include <thread>

#include "tests/support/fake_upstream.h"
#include "tests/support/http_client.h"

namespace idemgate::test {
namespace {

using std::chrono::milliseconds;
using A = UpstreamAction;

class FakeUpstreamTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(up_.Start());
    ASSERT_TRUE(client_.Connect(up_.port()));
  }
  HttpResponse Post(std::string body = "{}") {
    return client_.Request("POST", "/v1/x", {{"Idempotency-Key", "k1"}}, body);
  }
  FakeUpstream up_;
  TestClient client_;
};

TEST_F(FakeUpstreamTest, RespondsAndRecordsTheRequest) {
  up_.SetBehavior(UpstreamBehavior::Respond(201, R"({"id":1})", {{"Location", "/v1/x/1"}}));
  HttpResponse r =
      client_.Request("POST", "/v1/x?q=1",
                      {{"Idempotency-Key", "order-1"}, {"X-Forwarded-For", "10.0.0.1"}}, "hello");
  ASSERT_EQ(r.status, 201) << ::testing::PrintToString(r);
  EXPECT_EQ(r.reason, "Created");
  EXPECT_EQ(r.Header("location"), "/v1/x/1");
  EXPECT_EQ(r.Header("Content-Length"), "8");
  EXPECT_EQ(r.body, R"({"id":1})");
  EXPECT_EQ(r.raw,
            "HTTP/1.1 201 Created\r\nLocation: /v1/x/1\r\nContent-Length: 8\r\n\r\n{\"id\":1}");
  ASSERT_EQ(up_.requests(), 1);
  RecordedRequest got = *up_.last_request();
  EXPECT_EQ(got.method, "POST");
  EXPECT_EQ(got.target, "/v1/x?q=1");
  EXPECT_EQ(got.version, "HTTP/1.1");
  EXPECT_EQ(got.body, "hello");
  EXPECT_EQ(got.Header("idempotency-key"), "order-1");
  EXPECT_EQ(got.Header("X-Forwarded-For"), "10.0.0.1");
  EXPECT_EQ(got.HeaderCount("Host"), 1);
  EXPECT_FALSE(got.Header("Authorization"));
}

TEST_F(FakeUpstreamTest, KeepsTheConnectionAliveAndCountsConnections) {
  for (int i = 0; i < 3; ++i) EXPECT_EQ(Post().status, 200);
  EXPECT_EQ(up_.requests(), 3);
  EXPECT_EQ(up_.connections_accepted(), 1);
  for (const RecordedRequest& r : up_.received()) EXPECT_EQ(r.connection, 1);
  TestClient other(up_.port());
  EXPECT_EQ(other.Request("GET", "/").status, 200);
  EXPECT_EQ(up_.connections_accepted(), 2);
  EXPECT_EQ(up_.received().back().connection, 2);
}

TEST_F(FakeUpstreamTest, ConnectionCloseRequestClosesAfterTheAnswer) {
  HttpResponse r = client_.Request("GET", "/", {{"Connection", "close"}});
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.Header("Connection"), "close");
  EXPECT_TRUE(client_.IsClosed());
}

TEST_F(FakeUpstreamTest, DelayHoldsTheAnswer) {
  up_.SetBehavior(UpstreamBehavior::Respond(200, "late").WithDelay(300));
  ASSERT_TRUE(client_.SendRaw(TestClient::BuildRequest({"GET", "/", {}, ""})));
  ASSERT_TRUE(up_.WaitForRequests(1));
  EXPECT_EQ(client_.ReadResponse(milliseconds(50)).error, "timeout");
  HttpResponse r = client_.ReadResponse();
  EXPECT_EQ(r.body, "late");
}

TEST_F(FakeUpstreamTest, ResetAfterRequestIsAReadError) {
  up_.SetBehavior(UpstreamBehavior::Act(A::kResetAfterRequest));
  HttpResponse r = Post();
  EXPECT_EQ(r.error, "reset") << ::testing::PrintToString(r);
  EXPECT_EQ(up_.requests(), 1);
}

TEST_F(FakeUpstreamTest, CloseAfterRequestIsEofWithoutBytes) {
  up_.SetBehavior(UpstreamBehavior::Act(A::kCloseAfterRequest));
  HttpResponse r = Post();
  EXPECT_EQ(r.error, "eof");
  EXPECT_EQ(r.raw, "");
}

TEST_F(FakeUpstreamTest, MalformedIsNotHttp) {
  up_.SetBehavior(UpstreamBehavior::Act(A::kMalformed));
  HttpResponse r = Post();
  EXPECT_EQ(r.error, "malformed");
  EXPECT_TRUE(client_.IsClosed());
}

TEST_F(FakeUpstreamTest, HangNeverAnswersAndKeepsTheConnection) {
  up_.SetBehavior(UpstreamBehavior::Act(A::kHang));
  EXPECT_EQ(client_.Request("POST", "/", {}, "x", milliseconds(200)).error, "timeout");
  EXPECT_EQ(up_.requests(), 1);
  EXPECT_FALSE(client_.IsClosed(milliseconds(50)));
  EXPECT_EQ(up_.connections_open(), 1);
}

TEST_F(FakeUpstreamTest, PartialStopsShortOfItsContentLength) {
  up_.SetBehavior(UpstreamBehavior::Act(A::kPartial));
  HttpResponse r = Post();
  EXPECT_EQ(r.error, "eof");
  EXPECT_NE(r.raw.find("Content-Length: 100\r\n\r\n"), std::string::npos) << r.raw;
  EXPECT_EQ(r.raw.size() - (r.raw.find("\r\n\r\n") + 4), 10u);
}

TEST_F(FakeUpstreamTest, ChunkedIsDecodedAndKeepsAlive) {
  UpstreamBehavior b = UpstreamBehavior::Respond(200, "a chunked body, in three pieces");
  b.action = A::kChunked;
  up_.SetBehavior(b);
  HttpResponse r = Post();
  ASSERT_TRUE(r.ok()) << ::testing::PrintToString(r);
  EXPECT_EQ(r.Header("Transfer-Encoding"), "chunked");
  EXPECT_FALSE(r.Header("Content-Length"));
  EXPECT_EQ(r.body, "a chunked body, in three pieces");
  EXPECT_TRUE(r.raw.ends_with("\r\n0\r\n\r\n"));
  EXPECT_EQ(Post().body, "a chunked body, in three pieces");
  EXPECT_EQ(up_.connections_accepted(), 1);
}

TEST_F(FakeUpstreamTest, CloseDelimitedBodyEndsAtEof) {
  UpstreamBehavior b = UpstreamBehavior::Respond(200, "until the end");
  b.action = A::kCloseDelimited;
  up_.SetBehavior(b);
  HttpResponse r = Post();
  ASSERT_TRUE(r.ok()) << ::testing::PrintToString(r);
  EXPECT_FALSE(r.Header("Content-Length"));
  EXPECT_EQ(r.body, "until the end");
  EXPECT_TRUE(client_.IsClosed());
}

TEST_F(FakeUpstreamTest, Interim100PrecedesTheAnswer) {
  UpstreamBehavior b = UpstreamBehavior::Respond(201, "done");
  b.action = A::kInterim100;
  up_.SetBehavior(b);
  HttpResponse r = Post();
  EXPECT_EQ(r.status, 201);
  EXPECT_EQ(r.body, "done");
  EXPECT_EQ(r.interim_raw, "HTTP/1.1 100 Continue\r\n\r\n");
  // Read response by response, the interim one is its own answer.
  ASSERT_TRUE(client_.SendRaw(TestClient::BuildRequest({"POST", "/", {}, "x"})));
  HttpResponse interim = client_.ReadResponse();
  EXPECT_EQ(interim.status, 100);
  EXPECT_EQ(interim.raw, "HTTP/1.1 100 Continue\r\n\r\n");
  EXPECT_EQ(client_.ReadResponse().status, 201);
}

TEST_F(FakeUpstreamTest, BigBodyHasTheRequestedSize) {
  up_.SetBehavior(UpstreamBehavior::BigBody(3 << 20));
  HttpResponse r = Post();
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(r.body.size(), size_t{3} << 20);
  EXPECT_EQ(r.Header("Content-Length"), std::to_string(3 << 20));
  EXPECT_EQ(r.body.substr(0, 4), "abcd");
}

TEST_F(FakeUpstreamTest, QueuedBehavioursComeFirstThenTheDefault) {
  up_.EnqueueBehavior(UpstreamBehavior::Act(A::kResetAfterRequest));
  up_.EnqueueBehavior(UpstreamBehavior::Respond(503, "busy"));
  up_.SetBehavior(UpstreamBehavior::Respond(201, "ok"));
  EXPECT_EQ(Post().error, "reset");
  ASSERT_TRUE(client_.Connect(up_.port()));
  EXPECT_EQ(Post().status, 503);
  EXPECT_EQ(Post().status, 201);
  EXPECT_EQ(Post().status, 201);
  EXPECT_EQ(up_.requests(), 4);
}

TEST_F(FakeUpstreamTest, PipelinedRequestsAreAnsweredInOrder) {
  std::string two = TestClient::BuildRequest({"GET", "/a", {}, ""}) +
                    TestClient::BuildRequest({"POST", "/b", {}, "body-b"});
  up_.SetBehavior(UpstreamBehavior::Respond(200, "same"));
  ASSERT_TRUE(client_.SendRaw(two));
  HttpResponse a = client_.ReadResponse();
  HttpResponse b = client_.ReadResponse();
  EXPECT_EQ(a.status, 200);
  EXPECT_EQ(b.status, 200);
  EXPECT_EQ(a.raw, b.raw);
  std::vector<RecordedRequest> got = up_.received();
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].target, "/a");
  EXPECT_EQ(got[1].body, "body-b");
}

TEST_F(FakeUpstreamTest, WaitForRequestsWakesOnArrival) {
  up_.SetBehavior(UpstreamBehavior::Act(A::kHang));
  std::vector<RequestSpec> specs(5, RequestSpec{"POST", "/", {}, "x"});
  std::thread senders([&] { SendConcurrently(up_.port(), specs, milliseconds(2000)); });
  EXPECT_TRUE(up_.WaitForRequests(5));
  EXPECT_TRUE(up_.WaitForConnections(6));  // 5 + the fixture's client
  up_.Stop();  // closes the hanging connections, so the senders finish at once
  senders.join();
  EXPECT_EQ(up_.requests(), 5);
}

}  // namespace
}  // namespace idemgate::test
