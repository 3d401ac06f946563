// SPDX-License-Identifier: Apache-2.0
// The demo payment API, in-process and as the demo-payment-api program.
#include <gtest/gtest.h>

#include <cstdlib>
#include <regex>

#include "tests/support/demo_api.h"
#include "tests/support/gateway_process.h"
#include "tests/support/http_client.h"

namespace idemgate::test {
namespace {

const HeaderList kJson = {{"Content-Type", "application/json"}};

std::string DemoBinary() {
  const char* env = std::getenv("DEMO_API_BIN");
  return env != nullptr ? env : SiblingBinaryPath("demo-payment-api");
}

TEST(ExtractAmount, AcceptsPositiveDigitStringsOnly) {
  std::string detail;
  EXPECT_EQ(ExtractAmount(R"({"amount":"100000000"})", &detail), "100000000");
  EXPECT_EQ(ExtractAmount(R"({ "currency":"eur", "amount" : "42" })", &detail), "42");
  EXPECT_EQ(ExtractAmount(R"({"amount":"0"})", &detail), "");
  EXPECT_FALSE(detail.empty());
  EXPECT_EQ(ExtractAmount(R"({"amount":"12a"})", &detail), "");
  EXPECT_EQ(ExtractAmount(R"({"amount":12})", &detail), "");
  EXPECT_EQ(ExtractAmount(R"({"amount":""})", &detail), "");
  EXPECT_EQ(ExtractAmount(R"({"currency":"eur"})", &detail), "");
  EXPECT_EQ(ExtractAmount("", &detail), "");
}

class DemoApiTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(api_.Start(0)); }
  HttpResponse Post(TestClient& c, std::string body) {
    return c.Request("POST", "/v1/payment_intents", kJson, body);
  }
  DemoApi api_;
};

TEST_F(DemoApiTest, PostCreatesAFreshIntentEachTime) {
  TestClient c(api_.port());
  HttpResponse a = Post(c, R"({"amount":"100000000"})");
  HttpResponse b = Post(c, R"({"amount":"100000000"})");  // same socket, keep-alive
  ASSERT_EQ(a.status, 201) << ::testing::PrintToString(a);
  ASSERT_EQ(b.status, 201) << ::testing::PrintToString(b);
  EXPECT_EQ(a.reason, "Created");
  EXPECT_EQ(a.Header("content-type"), "application/json");
  std::regex location("/v1/payment_intents/pi_[0-9a-f]{24}");
  ASSERT_TRUE(a.Header("Location"));
  EXPECT_TRUE(std::regex_match(*a.Header("Location"), location)) << *a.Header("Location");
  EXPECT_NE(a.Header("Location"), b.Header("Location"));
  std::string id = a.Header("Location")->substr(std::string("/v1/payment_intents/").size());
  std::regex body(R"(\{"id":")" + id +
                  R"(","state":"created","version":1,"amount":"100000000","created_at":\d+\})");
  EXPECT_TRUE(std::regex_match(a.body, body)) << a.body;
  EXPECT_EQ(api_.executions(), 2);
  EXPECT_EQ(api_.created(), 2);
}

TEST_F(DemoApiTest, InvalidAmountIs400AndStillCountsAsAnExecution) {
  TestClient c(api_.port());
  for (const char* body : {R"({"amount":"0"})", R"({"amount":"abc"})", "{}"}) {
    HttpResponse r = Post(c, body);
    EXPECT_EQ(r.status, 400) << body;
    EXPECT_TRUE(r.body.starts_with(R"({"error":"invalid_amount","detail":")")) << r.body;
    EXPECT_FALSE(r.Header("Location"));
  }
  EXPECT_EQ(api_.executions(), 3);
  EXPECT_EQ(api_.created(), 0);
}

TEST_F(DemoApiTest, GetReturnsTheSameJsonAndUnknownIdsAre404) {
  TestClient c(api_.port());
  HttpResponse created = Post(c, R"({"amount":"250"})");
  ASSERT_EQ(created.status, 201);
  HttpResponse got = c.Request("GET", *created.Header("Location"));
  EXPECT_EQ(got.status, 200);
  EXPECT_EQ(got.body, created.body);
  EXPECT_EQ(c.Request("GET", "/v1/payment_intents/pi_000000000000000000000000").status, 404);
  EXPECT_EQ(c.Request("GET", "/nowhere").status, 404);
  EXPECT_EQ(api_.executions(), 1);  // GETs are not executions
}

TEST_F(DemoApiTest, StatsCountExecutionsAndCreations) {
  TestClient c(api_.port());
  Post(c, R"({"amount":"1"})");
  Post(c, R"({"amount":"0"})");
  HttpResponse stats = c.Request("GET", "/_demo/stats");
  EXPECT_EQ(stats.status, 200);
  EXPECT_EQ(stats.body, R"({"executions":2,"created":1})");
}

TEST_F(DemoApiTest, ConcurrentPostsAreAllExecuted) {
  RequestSpec spec{"POST", "/v1/payment_intents", kJson, R"({"amount":"7"})"};
  std::vector<HttpResponse> rs = SendConcurrently(api_.port(), 20, spec);
  for (const HttpResponse& r : rs) EXPECT_EQ(r.status, 201) << ::testing::PrintToString(r);
  EXPECT_EQ(api_.executions(), 20);
}

TEST(DemoApiDelay, DelaysTheAnswerButCountsOnArrival) {
  DemoApi api;
  DemoApi::Options options;
  options.delay_ms = 300;
  ASSERT_TRUE(api.Start(options));
  TestClient c(api.port());
  ASSERT_TRUE(c.SendRaw(
      TestClient::BuildRequest({"POST", "/v1/payment_intents", kJson, R"({"amount":"5"})"})));
  ASSERT_TRUE(api.WaitForExecutions(1));  // counted on arrival, before the answer
  EXPECT_EQ(c.ReadResponse(std::chrono::milliseconds(50)).error, "timeout");
  EXPECT_EQ(c.ReadResponse().status, 201);
}

TEST(DemoApiDelay, StopWithAPendingAnswerIsClean) {
  DemoApi api;
  DemoApi::Options options;
  options.delay_ms = 60'000;
  ASSERT_TRUE(api.Start(options));
  TestClient c(api.port());
  ASSERT_TRUE(c.SendRaw(
      TestClient::BuildRequest({"POST", "/v1/payment_intents", kJson, R"({"amount":"5"})"})));
  ASSERT_EQ(c.ReadResponse(std::chrono::milliseconds(50)).error, "timeout");
  api.Stop();
  EXPECT_TRUE(c.IsClosed());
}

TEST(DemoApiProgram, PrintsItsPortAnswersAndStopsOnSigterm) {
  GatewayProcess proc;
  ASSERT_TRUE(proc.Start(DemoBinary(), {"--port", "0"})) << proc.error();
  uint16_t port = proc.WaitForPort();
  ASSERT_NE(port, 0) << proc.log();
  TestClient c(port);
  EXPECT_EQ(c.Request("POST", "/v1/payment_intents", kJson, R"({"amount":"9"})").status, 201);
  EXPECT_EQ(c.Request("GET", "/_demo/stats").body, R"({"executions":1,"created":1})");
  ASSERT_TRUE(proc.Kill(SIGTERM));
  std::optional<ExitStatus> st = proc.Wait();
  ASSERT_TRUE(st);
  EXPECT_TRUE(st->exited() && st->code() == 0) << st->ToString() << "\n" << proc.log();
  EXPECT_NE(proc.log().find("stopped by signal"), std::string::npos) << proc.log();
}

TEST(DemoApiProgram, RejectsBadArguments) {
  GatewayProcess proc;
  ASSERT_TRUE(proc.Start(DemoBinary(), {"--port", "x"}));
  std::optional<ExitStatus> st = proc.Wait();
  ASSERT_TRUE(st);
  EXPECT_EQ(st->code(), 2);
  EXPECT_NE(proc.log().find("usage:"), std::string::npos) << proc.log();
}

}  // namespace
}  // namespace idemgate::test
