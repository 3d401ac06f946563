// SPDX-License-Identifier: Apache-2.0
// HTTP/2 as operations see it, through the binary (SPEC §14): the access log's `protocol` and
// the per-protocol request counter tell HTTP/2 requests from HTTP/1.1 ones; and a stream whose
// request carries `expect: 100-continue` hears the interim 100 before it sends its body.
#include <algorithm>
#include <string>
#include <vector>

#include "tests/integration/gateway_fixture.h"
#include "tests/support/h2_socket.h"
#include "tests/support/h2_test_client.h"
#include "tests/support/loopback.h"
#include "tests/support/tls_tools.h"

namespace idemgate::test {
namespace {

constexpr char kBody[] = R"({"amount":"100000000"})";

h2test::Fields KeyedFields(const std::string& key) {
  return {{"authorization", "Bearer merchant-demo"},
          {"idempotency-key", key},
          {"content-type", "application/json"}};
}

class Http2OpsTest : public GatewayTest {};

// One request over HTTP/2 (a guarded one), one over HTTP/1.1, and a passthrough one over
// HTTP/2: each access-log line names its protocol, and the counter counts each.
TEST_F(Http2OpsTest, AccessLogAndMetricsCarryTheProtocol) {
  Set("log", "access", "\"" + dir_.Path("access.log") + "\"");
  StartWithAdmin();
  CurlResult h2 = RunCurl(
      dir_, {"--http2-prior-knowledge", "-X", "POST", "-H", "Authorization: Bearer merchant-demo",
             "-H", "Idempotency-Key: proto-1", "--data-binary", kBody,
             "http://127.0.0.1:" + std::to_string(port_) + "/v1/payment_intents"});
  ASSERT_EQ(h2.status, 201) << h2.output;
  HttpResponse h1 = Post("proto-2", kBody);
  ASSERT_EQ(h1.status, 201);
  CurlResult relayed = RunCurl(
      dir_, {"--http2-prior-knowledge", "http://127.0.0.1:" + std::to_string(port_) + "/files/1"});
  ASSERT_EQ(relayed.status, 201) << relayed.output;

  const std::string log = AccessLogWhen(
      [](const std::string& text) { return std::count(text.begin(), text.end(), '\n') >= 3; });
  std::vector<std::string> lines;
  for (size_t at = 0, end; (end = log.find('\n', at)) != std::string::npos; at = end + 1) {
    lines.push_back(log.substr(at, end - at));
  }
  ASSERT_EQ(lines.size(), 3u) << log;
  // The lines in any order (two workers): each names its protocol after its path.
  auto count = [&](const std::string& needle) {
    return std::count_if(lines.begin(), lines.end(), [&](const std::string& line) {
      return line.find(needle) != std::string::npos;
    });
  };
  EXPECT_EQ(count(R"("path":"/v1/payment_intents","protocol":"HTTP/2",)"), 1) << log;
  EXPECT_EQ(count(R"("path":"/v1/payment_intents","protocol":"HTTP/1.1",)"), 1) << log;
  EXPECT_EQ(count(R"("path":"/files/1","protocol":"HTTP/2",)"), 1) << log;

  const std::string metrics = Scrape();
  EXPECT_EQ(MetricValue(metrics, R"(idemgate_requests_by_protocol_total{protocol="HTTP/2"})"), 2);
  EXPECT_EQ(MetricValue(metrics, R"(idemgate_requests_by_protocol_total{protocol="HTTP/1.1"})"), 1);
  EXPECT_EQ(MetricValue(metrics, R"(idemgate_requests_by_protocol_total{protocol="HTTP/1.0"})"), 0);
}

// A guarded request with `expect: 100-continue` and its body held back: the stream gets the
// interim 100 first, then (the body sent) its 201. A client that waits for the 100 would
// otherwise wait for nothing.
TEST_F(Http2OpsTest, ExpectContinueGetsTheInterim100) {
  StartGateway();
  UniqueFd fd = ConnectLoopback(port_);
  ASSERT_TRUE(fd.valid());
  h2test::TestClient client;
  h2test::Fields fields = KeyedFields("continue-1");
  fields.push_back({"expect", "100-continue"});
  const int32_t id = client.Request("POST", "/v1/payment_intents", fields, "", /*open=*/true);
  ASSERT_TRUE(PumpSocket(client, fd.get(), [&] { return client.streams[id].status != 0; }))
      << "no answer at all before the body";
  EXPECT_EQ(client.streams[id].status, 100);
  EXPECT_EQ(upstream_.requests(), 0);
  client.Send(id, kBody);
  client.End(id);
  ASSERT_TRUE(PumpSocket(client, fd.get(), [&] { return client.streams[id].closed; }));
  EXPECT_EQ(client.streams[id].status, 201);
  EXPECT_EQ(upstream_.requests(), 1);
  ASSERT_TRUE(upstream_.last_request());
  EXPECT_EQ(upstream_.last_request()->body, kBody);
  EXPECT_FALSE(upstream_.last_request()->Header("Expect"));  // hop by hop, as over HTTP/1.1
}

}  // namespace
}  // namespace idemgate::test
