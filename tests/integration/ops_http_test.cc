// SPDX-License-Identifier: Apache-2.0
// Through the real binary: what the gateway does with requests an operator's clients send
// that are not quite HTTP/1.1: HTTP/1.0 without Host, empty credentials, HTTP/2 prefaces.
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <string>
#include <thread>

#include "tests/integration/gateway_fixture.h"

namespace idemgate::test {
namespace {

// HTTP/1.0 allows a request without Host; it goes upstream as HTTP/1.1, which requires one.
TEST_F(GatewayTest, Http10WithoutHostGetsTheUpstreamsHost) {
  StartGateway();
  TestClient client(port_);
  ASSERT_TRUE(
      client.SendRaw("POST /v1/payment_intents HTTP/1.0\r\nAuthorization: Bearer merchant-demo\r\n"
                     "Idempotency-Key: h10-1\r\nContent-Length: 2\r\n\r\n{}"));
  HttpResponse r = client.ReadResponse();
  EXPECT_EQ(r.status, 201) << r.raw;
  ASSERT_TRUE(upstream_.last_request().has_value());
  EXPECT_EQ(upstream_.last_request()->version, "HTTP/1.1");
  EXPECT_EQ(upstream_.last_request()->HeaderCount("Host"), 1);
  EXPECT_EQ(upstream_.last_request()->Header("Host"),
            "127.0.0.1:" + std::to_string(upstream_.port()));

  // A client's own Host is forwarded as sent, never doubled.
  TestClient with_host(port_);
  ASSERT_TRUE(with_host.SendRaw("GET /v1/x HTTP/1.0\r\nHost: api.example\r\n\r\n"));
  EXPECT_EQ(with_host.ReadResponse().status, 201);
  EXPECT_EQ(upstream_.last_request()->HeaderCount("Host"), 1);
  EXPECT_EQ(upstream_.last_request()->Header("Host"), "api.example");
}

// A credential header that is there but empty is told so, not that it is missing.
TEST_F(GatewayTest, EmptyCredentialIsToldItIsEmpty) {
  StartGateway();
  for (const char* value : {"Bearer", "Bearer ", ""}) {
    HttpResponse r = Post("empty-1", "{}", "/v1/payment_intents", {{"Authorization", value}});
    EXPECT_EQ(r.status, 401) << "[" << value << "]";
    EXPECT_EQ(ErrorCodeOf(r), "missing_credentials") << r.raw;
    EXPECT_NE(r.body.find("Authorization header is empty"), std::string::npos) << r.body;
  }
  HttpResponse absent = Post("empty-1", "{}", "/v1/payment_intents", {});
  EXPECT_EQ(absent.status, 401);
  EXPECT_EQ(absent.body.find("is empty"), std::string::npos) << absent.body;
  EXPECT_EQ(upstream_.requests(), 0);
}

// With listen.http2 = false, `curl --http2-prior-knowledge`: the preface gets a JSON 400 that
// says so.
TEST_F(GatewayTest, Http2PrefaceIsToldHttp2IsNotSpoken) {
  Set("listen", "http2", "false");  // SPEC §14 H1: with HTTP/2 off, the preface gets this 400
  StartGateway();
  TestClient client(port_);
  // The preface, then an empty SETTINGS frame, as curl sends them.
  ASSERT_TRUE(client.SendRaw(std::string("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n") +
                             std::string("\x00\x00\x00\x04\x00\x00\x00\x00\x00", 9)));
  HttpResponse r = client.ReadResponse();
  EXPECT_EQ(r.status, 400) << r.raw;
  EXPECT_EQ(ErrorCodeOf(r), "bad_request") << r.raw;
  EXPECT_NE(r.body.find("HTTP/2 is not spoken here"), std::string::npos) << r.body;
  EXPECT_EQ(upstream_.requests(), 0);
}

// A client that hangs up before its answer is logged as nginx does: status 499, with the answer
// it would have had (stored: the retry replays it).
TEST_F(GatewayTest, ClientGoneBeforeItsAnswerIsLogged499) {
  Set("log", "access", "\"" + dir_.Path("access.log") + "\"");
  upstream_.SetBehavior(UpstreamBehavior::Respond(201, "{}").WithDelay(300));
  StartGateway();
  {
    TestClient client(port_);
    ASSERT_TRUE(client.SendRaw(TestClient::BuildRequest(
        {"POST", "/v1/payment_intents", {kMerchant[0], {"Idempotency-Key", "gone-1"}}, "{}"})));
    ASSERT_TRUE(upstream_.WaitForRequests(1));
  }  // closed while the upstream works
  std::string log =
      AccessLogWhen([](const std::string& text) { return text.find('\n') != std::string::npos; });
  EXPECT_NE(log.find("\"status\":499,\"answer_status\":201,\"outcome\":\"fresh\""),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("\"bytes_out\":0"), std::string::npos) << log;
  HttpResponse retry = Post("gone-1", "{}");
  EXPECT_EQ(retry.Header("Idempotent-Replayed"), "true");
  EXPECT_EQ(upstream_.requests(), 1);
}

// X-Request-Id: the client's is passed on; a request without a usable one gets a new one; the
// upstream sees it and the access log has it.
TEST_F(GatewayTest, RequestIdIsForwardedAndLogged) {
  Set("log", "access", "\"" + dir_.Path("access.log") + "\"");
  StartGateway();
  HeaderList given = kMerchant;
  given.emplace_back("X-Request-Id", "req-abc-123");
  ASSERT_EQ(Post("rid-1", "{}", "/v1/payment_intents", given).status, 201);
  EXPECT_EQ(upstream_.last_request()->HeaderCount("X-Request-Id"), 1);
  EXPECT_EQ(upstream_.last_request()->Header("X-Request-Id"), "req-abc-123");

  ASSERT_EQ(Post("rid-2", "{}").status, 201);  // none given: made
  std::string made = upstream_.last_request()->Header("X-Request-Id").value_or("");
  EXPECT_TRUE(std::regex_match(made, std::regex("[0-9a-f]{32}"))) << made;

  HeaderList bad = kMerchant;
  bad.emplace_back("X-Request-Id", std::string(200, 'x'));  // too long: replaced
  ASSERT_EQ(Post("rid-3", "{}", "/v1/payment_intents", bad).status, 201);
  EXPECT_EQ(upstream_.last_request()->HeaderCount("X-Request-Id"), 1);
  EXPECT_NE(upstream_.last_request()->Header("X-Request-Id"), std::string(200, 'x'));
  EXPECT_TRUE(std::regex_match(upstream_.last_request()->Header("X-Request-Id").value_or(""),
                               std::regex("[0-9a-f]{32}")));  // a made one, as for rid-2

  std::string log = AccessLogWhen(
      [](const std::string& text) { return std::count(text.begin(), text.end(), '\n') >= 3; });
  EXPECT_NE(log.find("\"request_id\":\"req-abc-123\""), std::string::npos) << log;
  EXPECT_NE(log.find("\"request_id\":\"" + made + "\""), std::string::npos) << log;
}

// Every answer carries its own request's X-Request-Id: a first answer, a replay (never the first
// request's id, nor one the upstream echoed or set, which is not stored), a gateway error, a
// passthrough. The access log has the replay under its own id.
TEST_F(GatewayTest, EveryAnswerReturnsItsOwnRequestId) {
  Set("log", "access", "\"" + dir_.Path("access.log") + "\"");
  upstream_.SetBehavior(UpstreamBehavior::Respond(
      201, R"({"id":"pi_1"})",
      {{"Content-Type", "application/json"}, {"X-Request-Id", "set-by-upstream"}}));
  StartGateway();
  auto with_id = [](const std::string& id) {
    HeaderList h = kMerchant;
    h.emplace_back("X-Request-Id", id);
    return h;
  };
  HttpResponse first = Post("rid-r", "{}", "/v1/payment_intents", with_id("first-id"));
  ASSERT_EQ(first.status, 201) << first.raw;
  EXPECT_EQ(first.HeaderCount("X-Request-Id"), 1) << first.raw;
  EXPECT_EQ(first.Header("X-Request-Id"), "first-id");

  HttpResponse replay = Post("rid-r", "{}", "/v1/payment_intents", with_id("second-id"));
  ASSERT_EQ(replay.Header("Idempotent-Replayed"), "true") << replay.raw;
  EXPECT_EQ(replay.HeaderCount("X-Request-Id"), 1) << replay.raw;
  EXPECT_EQ(replay.Header("X-Request-Id"), "second-id");
  EXPECT_EQ(replay.raw.find("first-id"), std::string::npos) << replay.raw;
  EXPECT_EQ(replay.raw.find("set-by-upstream"), std::string::npos) << replay.raw;
  EXPECT_EQ(replay.body, first.body);
  EXPECT_EQ(upstream_.requests(), 1);

  HttpResponse made = Post("rid-r", "{}");  // none given: the gateway's own, returned
  EXPECT_EQ(made.HeaderCount("X-Request-Id"), 1) << made.raw;
  EXPECT_TRUE(
      std::regex_match(made.Header("X-Request-Id").value_or(""), std::regex("[0-9a-f]{32}")))
      << made.raw;

  HttpResponse rejected = Post("rid-401", "{}", "/v1/payment_intents", {{"X-Request-Id", "e-1"}});
  EXPECT_EQ(rejected.status, 401) << rejected.raw;
  EXPECT_EQ(rejected.Header("X-Request-Id"), "e-1");
  TestClient client(port_);
  HttpResponse passthrough = client.Request("GET", "/v1/things", {{"X-Request-Id", "p-1"}});
  EXPECT_EQ(passthrough.HeaderCount("X-Request-Id"), 1) << passthrough.raw;
  EXPECT_EQ(passthrough.Header("X-Request-Id"), "p-1");

  std::string log = AccessLogWhen([](const std::string& text) {
    return text.find("\"request_id\":\"p-1\"") != std::string::npos;
  });
  EXPECT_NE(log.find("\"request_id\":\"second-id\",\"status\":201,\"outcome\":\"replay\""),
            std::string::npos)
      << log;
}

// Operators find the gateway's threads by name in `top -H`, `ps -L` and gdb (docs/operations.md
// "Threads").
TEST_F(GatewayTest, ThreadsCarryTheirNames) {
  Set("log", "access", "\"" + dir_.Path("access.log") + "\"");
  StartGateway();
  std::multiset<std::string> names;
  for (const auto& task :
       std::filesystem::directory_iterator("/proc/" + std::to_string(gateway_.pid()) + "/task")) {
    std::ifstream comm(task.path() / "comm");
    std::string name;
    std::getline(comm, name);
    names.insert(name);
  }
  EXPECT_EQ(names.count("idg-worker-0"), 1u);
  EXPECT_EQ(names.count("idg-worker-1"), 1u);
  EXPECT_EQ(names.count("idg-store"), 1u);
  EXPECT_EQ(names.count("idg-accesslog"), 1u);
}

}  // namespace
}  // namespace idemgate::test
