// SPDX-License-Identifier: Apache-2.0
// HTTP/2 from clients through the real binary (SPEC §14), with real clients: curl
// (--http2-prior-knowledge on a plain port, --http2 by ALPN on TLS) and nghttp. The seed
// transcript, fifty concurrent streams on one connection with one key, a request retried over
// the other protocol, and listen.http2 = false.
#include <csignal>
#include <functional>
#include <regex>
#include <string>

#include "tests/integration/gateway_fixture.h"
#include "tests/support/h2_socket.h"
#include "tests/support/h2_test_client.h"
#include "tests/support/loopback.h"
#include "tests/support/tls_tools.h"

namespace idemgate::test {
namespace {

constexpr char kBody[] = R"({"amount":"100000000"})";
constexpr char kUpstreamBody[] = R"({"id":"pi_1","state":"created"})";

using namespace std::chrono_literals;

h2test::Fields KeyedFields(const std::string& key) {
  return {{"authorization", "Bearer merchant-demo"},
          {"idempotency-key", key},
          {"content-type", "application/json"}};
}

class Http2Test : public GatewayTest {
 protected:
  void SetUp() override {
    GatewayTest::SetUp();
    ASSERT_FALSE(FindProgram("curl").empty());
  }

  // curl POST /v1/payment_intents with a key, over HTTP/2 (`extra` picks how), and what curl
  // says the protocol was (-w %{http_version}: "2" or "1.1").
  CurlResult Post(const std::string& key, const std::string& body, std::vector<std::string> extra,
                  std::string* version = nullptr) {
    std::vector<std::string> args = {"-X",
                                     "POST",
                                     "-H",
                                     "Authorization: Bearer merchant-demo",
                                     "-H",
                                     "Idempotency-Key: " + key,
                                     "-H",
                                     "Content-Type: application/json",
                                     "--data-binary",
                                     body,
                                     "-w",
                                     "\nversion=%{http_version}\n"};
    args.insert(args.end(), extra.begin(), extra.end());
    CurlResult r = RunCurl(dir_, args);
    std::smatch m;
    static const std::regex kVersion(R"(version=([0-9.]+))");
    if (version != nullptr && std::regex_search(r.output, m, kVersion)) *version = m[1].str();
    return r;
  }
  std::string PlainUrl() const {
    return "http://127.0.0.1:" + std::to_string(port_) + "/v1/payment_intents";
  }
};

// The seed transcript over h2c (prior knowledge): 201, the replayed 201 with the same bytes,
// and 422 for the same key with another body; the upstream executed once.
TEST_F(Http2Test, SeedTranscriptOverPriorKnowledge) {
  upstream_.SetBehavior(UpstreamBehavior::Respond(201, kUpstreamBody,
                                                  {{"Content-Type", "application/json"},
                                                   {"Location", "/v1/payment_intents/pi_1"},
                                                   {"Connection", "keep-alive"},
                                                   {"Keep-Alive", "timeout=5"}}));
  StartGateway();
  std::string version;
  CurlResult first = Post("order-1001", kBody, {"--http2-prior-knowledge", PlainUrl()}, &version);
  ASSERT_EQ(first.exit_code, 0) << first.output;
  EXPECT_EQ(version, "2");
  EXPECT_EQ(first.status, 201);
  EXPECT_EQ(first.body, kUpstreamBody);
  EXPECT_EQ(first.Header("location"), "/v1/payment_intents/pi_1");
  EXPECT_EQ(first.Header("keep-alive"), std::nullopt);  // H3: forbidden over HTTP/2
  EXPECT_EQ(first.Header("idempotent-replayed"), std::nullopt);
  ASSERT_TRUE(first.Header("x-request-id"));

  CurlResult replay = Post("order-1001", kBody, {"--http2-prior-knowledge", PlainUrl()});
  EXPECT_EQ(replay.status, 201);
  EXPECT_EQ(replay.body, first.body);
  EXPECT_EQ(replay.Header("idempotent-replayed"), "true");
  EXPECT_EQ(replay.Header("location"), "/v1/payment_intents/pi_1");
  EXPECT_TRUE(replay.Header("age"));
  EXPECT_NE(replay.Header("x-request-id"), first.Header("x-request-id"));

  CurlResult other =
      Post("order-1001", R"({"amount":"999000000"})", {"--http2-prior-knowledge", PlainUrl()});
  EXPECT_EQ(other.status, 422);
  EXPECT_NE(other.body.find("idempotency_key_reused"), std::string::npos) << other.body;
  EXPECT_EQ(upstream_.requests(), 1);
}

// H2: the fingerprint does not depend on the protocol: h2 first and HTTP/1.1 retry, and the
// reverse, each replay.
TEST_F(Http2Test, RetryOverTheOtherProtocolReplays) {
  StartGateway();
  CurlResult h2 = Post("cross-1", kBody, {"--http2-prior-knowledge", PlainUrl()});
  ASSERT_EQ(h2.status, 201) << h2.output;
  TestClient h1(port_);
  HeaderList headers = kMerchant;
  headers.push_back({"Idempotency-Key", "cross-1"});
  headers.push_back({"Content-Type", "application/json"});
  HttpResponse retried = h1.Request("POST", "/v1/payment_intents", headers, kBody);
  EXPECT_EQ(retried.status, 201);
  EXPECT_EQ(retried.Header("Idempotent-Replayed"), "true");
  EXPECT_EQ(retried.body, h2.body);

  headers[1].second = "cross-2";
  HttpResponse first = h1.Request("POST", "/v1/payment_intents", headers, kBody);
  ASSERT_EQ(first.status, 201);
  CurlResult again = Post("cross-2", kBody, {"--http2-prior-knowledge", PlainUrl()});
  EXPECT_EQ(again.status, 201);
  EXPECT_EQ(again.Header("idempotent-replayed"), "true");
  EXPECT_EQ(again.body, first.body);
  EXPECT_EQ(upstream_.requests(), 2);
}

// Fifty streams on one connection (nghttp -m 50), one key: every answer a 201 (the first or a
// replay) or a 409, and the upstream executes once.
TEST_F(Http2Test, FiftyConcurrentStreamsWithOneKeyExecuteOnce) {
  const std::string nghttp = FindProgram("nghttp");
  if (nghttp.empty()) GTEST_SKIP() << "nghttp (Debian nghttp2-client) is not installed";
  upstream_.SetBehavior(
      UpstreamBehavior::Respond(201, kUpstreamBody, {{"Content-Type", "application/json"}})
          .WithDelay(300));
  StartGateway();
  const std::string body_file = dir_.WriteFile("body.json", kBody);
  ProgramResult r = RunProgram(
      nghttp, {"-v", "-n", "-m", "50", "-d", body_file, "-H", "authorization: Bearer merchant-demo",
               "-H", "idempotency-key: fifty-1", PlainUrl()});
  ASSERT_EQ(r.exit_code, 0) << r.output.substr(0, 2000);
  auto count = [&](const std::string& needle) {
    int n = 0;
    for (size_t at = r.output.find(needle); at != std::string::npos;
         at = r.output.find(needle, at + 1)) {
      ++n;
    }
    return n;
  };
  const int created = count(":status: 201");
  const int in_use = count(":status: 409");
  EXPECT_EQ(created + in_use, 50) << r.output.substr(0, 2000);
  EXPECT_GE(created, 1);
  EXPECT_EQ(upstream_.requests(), 1);
}

// H1 on TLS: ALPN offers h2 (curl --http2 takes it), and http/1.1 still works.
TEST_F(Http2Test, TlsListenerOffersH2ByAlpn) {
  std::string error;
  auto ca = MakeTestCa(dir_, "ca", &error);
  ASSERT_TRUE(ca) << error;
  auto cert =
      MakeTestServerCert(dir_, "server", *ca, "localhost", "DNS:localhost,IP:127.0.0.1", &error);
  ASSERT_TRUE(cert) << error;
  Set("listen", "tls_cert", "\"" + cert->cert + "\"");
  Set("listen", "tls_key", "\"" + cert->key + "\"");
  StartGateway();
  const std::string url = "https://localhost:" + std::to_string(port_) + "/v1/payment_intents";
  const std::vector<std::string> tls = {"--cacert", ca->cert, "--resolve",
                                        "localhost:" + std::to_string(port_) + ":127.0.0.1"};
  std::vector<std::string> h2 = tls;
  h2.insert(h2.end(), {"--http2", url});
  std::string version;
  CurlResult first = Post("tls-1", kBody, h2, &version);
  ASSERT_EQ(first.exit_code, 0) << first.output;
  EXPECT_EQ(version, "2");
  EXPECT_EQ(first.status, 201);
  std::vector<std::string> h1 = tls;
  h1.insert(h1.end(), {"--http1.1", url});
  CurlResult replay = Post("tls-1", kBody, h1, &version);
  EXPECT_EQ(version, "1.1");
  EXPECT_EQ(replay.status, 201);
  EXPECT_EQ(replay.Header("Idempotent-Replayed"), "true");
  EXPECT_EQ(upstream_.requests(), 1);
}

// H4: a stream the client resets after its request went upstream is detached like a closed
// connection: the answer is stored, and the retry (on the same connection, and over HTTP/1.1)
// replays it; the upstream executed once.
TEST_F(Http2Test, ResetAfterTheRequestWentUpstreamStoresTheResult) {
  upstream_.SetBehavior(
      UpstreamBehavior::Respond(201, kUpstreamBody, {{"Content-Type", "application/json"}})
          .WithDelay(500));
  StartGateway();
  UniqueFd fd = ConnectLoopback(port_);
  ASSERT_TRUE(fd.valid());
  h2test::TestClient client;
  const int32_t first =
      client.Request("POST", "/v1/payment_intents", KeyedFields("detach-1"), kBody);
  ASSERT_TRUE(PumpSocket(client, fd.get(), [&] { return upstream_.requests() == 1; }));
  client.Reset(first, NGHTTP2_CANCEL);
  ASSERT_TRUE(PumpSocket(client, fd.get(), [&] { return client.streams[first].closed; }));
  EXPECT_EQ(client.streams[first].status, 0);  // no answer came on the reset stream

  h2test::Fields waiting = KeyedFields("detach-1");
  waiting.push_back({"prefer", "wait=5"});  // SPEC §10: wait for the first attempt's answer
  const int32_t retry = client.Request("POST", "/v1/payment_intents", waiting, kBody);
  ASSERT_TRUE(PumpSocket(client, fd.get(), [&] { return client.streams[retry].closed; }));
  EXPECT_EQ(client.streams[retry].status, 201);
  EXPECT_EQ(client.streams[retry].Header("idempotent-replayed"), "true");
  EXPECT_EQ(client.streams[retry].body, kUpstreamBody);

  TestClient h1(port_);
  HeaderList headers = kMerchant;
  headers.push_back({"Idempotency-Key", "detach-1"});
  headers.push_back({"Content-Type", "application/json"});
  HttpResponse over_h1 = h1.Request("POST", "/v1/payment_intents", headers, kBody);
  EXPECT_EQ(over_h1.status, 201);
  EXPECT_EQ(over_h1.Header("Idempotent-Replayed"), "true");
  EXPECT_EQ(upstream_.requests(), 1);
}

// H6: at drain start the connection gets GOAWAY (NO_ERROR, naming the last stream taken), the
// open stream still gets its answer, and the gateway exits cleanly.
TEST_F(Http2Test, ShutdownSendsGoawayAndFinishesOpenStreams) {
  upstream_.SetBehavior(
      UpstreamBehavior::Respond(201, kUpstreamBody, {{"Content-Type", "application/json"}})
          .WithDelay(800));
  StartGateway();
  UniqueFd fd = ConnectLoopback(port_);
  ASSERT_TRUE(fd.valid());
  h2test::TestClient client;
  const int32_t id = client.Request("POST", "/v1/payment_intents", KeyedFields("drain-1"), kBody);
  ASSERT_TRUE(PumpSocket(client, fd.get(), [&] { return upstream_.requests() == 1; }));
  ASSERT_TRUE(gateway_.Kill(SIGTERM));
  ASSERT_TRUE(PumpSocket(client, fd.get(), [&] { return client.streams[id].closed; }));
  EXPECT_TRUE(client.goaway);
  EXPECT_EQ(client.goaway_code, uint32_t{NGHTTP2_NO_ERROR});
  EXPECT_EQ(client.goaway_last_stream, id);
  EXPECT_EQ(client.streams[id].status, 201);
  EXPECT_EQ(client.streams[id].body, kUpstreamBody);
  std::optional<ExitStatus> status = gateway_.Wait();
  ASSERT_TRUE(status);
  EXPECT_TRUE(status->exited() && status->code() == 0) << gateway_.log();
}

// SPEC §14 H5: a passthrough request streams over HTTP/2 in both directions, with no body limit
// of the gateway's own: an upload over limits.max_request_body reaches the upstream whole, and
// an answer over limits.max_response_body reaches the client whole (buffered, each would fail).
TEST_F(Http2Test, PassthroughStreamsBothWays) {
  Set("limits", "max_request_body", "\"64KiB\"");
  Set("limits", "max_response_body", "\"64KiB\"");
  upstream_.SetBehavior(UpstreamBehavior::Respond(201, "stored", {}));
  StartGateway();
  std::string upload(3 << 20, 'u');
  for (size_t i = 0; i < upload.size(); i += 4096) upload[i] = static_cast<char>('a' + i % 26);
  const std::string file = dir_.WriteFile("upload.bin", upload);
  CurlResult up =
      RunCurl(dir_, {"--http2-prior-knowledge", "-X", "PUT", "--data-binary", "@" + file,
                     "http://127.0.0.1:" + std::to_string(port_) + "/files/1"});
  ASSERT_EQ(up.exit_code, 0) << up.output;
  EXPECT_EQ(up.status, 201);
  ASSERT_TRUE(upstream_.last_request());
  EXPECT_EQ(upstream_.last_request()->body.size(), upload.size());
  EXPECT_TRUE(upstream_.last_request()->body == upload);

  upstream_.SetBehavior(UpstreamBehavior::BigBody(5 << 20));
  CurlResult down = RunCurl(
      dir_, {"--http2-prior-knowledge", "http://127.0.0.1:" + std::to_string(port_) + "/files/2"});
  ASSERT_EQ(down.exit_code, 0) << down.output;
  EXPECT_EQ(down.status, 200);
  ASSERT_EQ(down.body.size(), 5u << 20);
  EXPECT_EQ(down.body.substr(0, 5), "abcde");
  EXPECT_EQ(down.Header("content-length"), std::to_string(5 << 20));
}

// listen.http2 = false: the preface gets today's 400, and curl's prior knowledge fails.
TEST_F(Http2Test, Http2OffAnswersThePrefaceWith400) {
  Set("listen", "http2", "false");
  StartGateway();
  TestClient raw(port_);
  ASSERT_TRUE(raw.SendRaw("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"));
  HttpResponse r = raw.ReadResponse();
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(ErrorCodeOf(r), "bad_request");
  CurlResult curl = Post("off-1", kBody, {"--http2-prior-knowledge", PlainUrl()});
  EXPECT_NE(curl.exit_code, 0);
  EXPECT_EQ(upstream_.requests(), 0);
}

}  // namespace
}  // namespace idemgate::test
