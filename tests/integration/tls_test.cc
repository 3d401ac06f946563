// SPDX-License-Identifier: Apache-2.0
// TLS through the real binary: the client-facing listener (curl with the right CA, without it,
// with the wrong one, TLS 1.1) and https upstreams (CA file, wrong CA, IP SAN, name mismatch).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <regex>
#include <thread>

#include "tests/integration/gateway_fixture.h"
#include "tests/support/loopback.h"
#include "tests/support/tls_tools.h"

namespace idemgate::test {
namespace {

using namespace std::chrono_literals;

std::string ErrorCodeOf(const std::string& body) {
  std::smatch m;
  static const std::regex kError(R"re(^\{"error":"([a-z_]+)","detail":"[^"]+)re");
  return std::regex_search(body, m, kError) ? m[1].str() : "";
}

constexpr char kBody[] = R"({"amount":"100"})";
constexpr char kUpstreamBody[] = R"({"id":"pi_1","state":"created"})";

// A CA, an unrelated CA, and certificates for localhost/127.0.0.1 and for other.example only,
// all made at test time.
class TlsTest : public GatewayTest {
 protected:
  void SetUp() override {
    GatewayTest::SetUp();
    ASSERT_FALSE(FindProgram("openssl").empty());
    ASSERT_FALSE(FindProgram("curl").empty());
    std::string error;
    auto ca = MakeTestCa(dir_, "ca", &error);
    ASSERT_TRUE(ca) << error;
    auto wrong = MakeTestCa(dir_, "wrong-ca", &error);
    ASSERT_TRUE(wrong) << error;
    auto server =
        MakeTestServerCert(dir_, "server", *ca, "localhost", "DNS:localhost,IP:127.0.0.1", &error);
    ASSERT_TRUE(server) << error;
    auto other =
        MakeTestServerCert(dir_, "other", *ca, "other.example", "DNS:other.example", &error);
    ASSERT_TRUE(other) << error;
    ca_ = *ca;
    wrong_ca_ = *wrong;
    server_ = *server;
    other_ = *other;
  }

  // curl POST with an Idempotency-Key to https://HOST:port_/v1/payment_intents, plus `extra`.
  CurlResult CurlPost(const std::string& key, std::vector<std::string> extra,
                      const std::string& host = "localhost", uint16_t port = 0) {
    std::vector<std::string> args = {"-X",
                                     "POST",
                                     "-H",
                                     "Authorization: Bearer merchant-demo",
                                     "-H",
                                     "Idempotency-Key: " + key,
                                     "-H",
                                     "Content-Type: application/json",
                                     "--data-binary",
                                     kBody,
                                     "--max-time",
                                     "10"};
    args.insert(args.end(), extra.begin(), extra.end());
    args.push_back("https://" + host + ":" + std::to_string(port != 0 ? port : port_) +
                   "/v1/payment_intents");
    return RunCurl(dir_, args);
  }

  CertFiles ca_, wrong_ca_, server_, other_;
};

// ---- The client-facing TLS listener ----

class TlsListenerTest : public TlsTest {
 protected:
  void SetUp() override {
    TlsTest::SetUp();
    // Relative to the config file's directory (the config is dir_/idemgate.toml).
    Set("listen", "tls_cert", "\"server.pem\"");
    Set("listen", "tls_key", "\"server.key\"");
    StartGateway();
  }
};

TEST_F(TlsListenerTest, CurlWithTheCaCreatesThenReplays) {
  CurlResult first = CurlPost("tls-1", {"--cacert", ca_.cert});
  ASSERT_EQ(first.exit_code, 0) << first.output;
  EXPECT_EQ(first.status, 201);
  EXPECT_EQ(first.body, kUpstreamBody);
  EXPECT_FALSE(first.Header("Idempotent-Replayed").has_value());
  ASSERT_EQ(upstream_.requests(), 1);
  auto seen = upstream_.last_request();
  ASSERT_TRUE(seen);
  EXPECT_EQ(seen->Header("X-Forwarded-Proto"), "https");
  EXPECT_EQ(seen->body, kBody);

  CurlResult again = CurlPost("tls-1", {"--cacert", ca_.cert});
  ASSERT_EQ(again.exit_code, 0) << again.output;
  EXPECT_EQ(again.status, 201);
  EXPECT_EQ(again.Header("Idempotent-Replayed"), "true");
  EXPECT_EQ(again.body, first.body);
  EXPECT_EQ(upstream_.requests(), 1);
}

TEST_F(TlsListenerTest, ExplicitTls12IsAccepted) {
  CurlResult r = CurlPost("tls-12", {"--cacert", ca_.cert, "--tlsv1.2", "--tls-max", "1.2"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.status, 201);
  EXPECT_EQ(upstream_.requests(), 1);
}

TEST_F(TlsListenerTest, ByIpAddressVerifiesAgainstTheIpSan) {
  CurlResult r = CurlPost("tls-ip", {"--cacert", ca_.cert}, "127.0.0.1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.status, 201);
}

TEST_F(TlsListenerTest, ClientWithoutTheCaFailsTheHandshake) {
  CurlResult no_ca = CurlPost("tls-no-ca", {});  // the system store does not know this CA
  EXPECT_EQ(no_ca.exit_code, 60) << no_ca.output;
  CurlResult wrong = CurlPost("tls-wrong-ca", {"--cacert", wrong_ca_.cert});
  EXPECT_EQ(wrong.exit_code, 60) << wrong.output;
  EXPECT_EQ(upstream_.requests(), 0);
  // The listener still serves a client that trusts the CA.
  CurlResult good = CurlPost("tls-no-ca", {"--cacert", ca_.cert});
  ASSERT_EQ(good.exit_code, 0) << good.output;
  EXPECT_EQ(good.status, 201);
}

// curl refuses TLS 1.1 on its own at the default security level, so the client is told to allow
// it (SECLEVEL=0); the control below shows that this client really completes a TLS 1.1
// handshake with a server that offers it.
const std::vector<std::string> kTls11Only = {"--tlsv1.1", "--tls-max", "1.1", "--ciphers",
                                             "DEFAULT@SECLEVEL=0"};

TEST_F(TlsListenerTest, Tls11IsRefused) {
  std::vector<std::string> args = {"--cacert", ca_.cert};
  args.insert(args.end(), kTls11Only.begin(), kTls11Only.end());
  CurlResult r = CurlPost("tls-11", args);
  EXPECT_EQ(r.exit_code, 35) << r.output;  // SSL connect error
  EXPECT_EQ(r.status, 0);
  EXPECT_EQ(upstream_.requests(), 0);

  // Control: the same client against `openssl s_server -tls1_1` gets an answer.
  GatewayProcess s_server;
  ASSERT_TRUE(s_server.Start(FindProgram("openssl"),
                             {"s_server", "-accept", "127.0.0.1:0", "-cert", server_.cert, "-key",
                              server_.key, "-www", "-tls1_1", "-cipher", "DEFAULT@SECLEVEL=0"}))
      << s_server.error();
  uint16_t port = s_server.WaitForPort("ACCEPT ");
  ASSERT_NE(port, 0) << s_server.log();
  std::vector<std::string> get = {"--cacert", ca_.cert, "--max-time", "10"};
  get.insert(get.end(), kTls11Only.begin(), kTls11Only.end());
  get.push_back("https://localhost:" + std::to_string(port) + "/");
  CurlResult control = RunCurl(dir_, get);
  EXPECT_EQ(control.exit_code, 0) << control.output;
  EXPECT_EQ(control.status, 200);
}

// As nginx does: a readable 400 in plain HTTP, not a failed handshake (a reset).
TEST_F(TlsListenerTest, PlainHttpOnTheTlsPortGetsAClear400) {
  for (const char* method : {"POST", "PATCH"}) {  // OpenSSL itself recognizes POST, not PATCH
    TestClient client(port_);
    HttpResponse r = client.Request(method, "/v1/payment_intents",
                                    {kMerchant[0], {"Idempotency-Key", "tls-plain"}}, kBody);
    EXPECT_EQ(r.status, 400) << method << ": " << r.raw;
    EXPECT_EQ(ErrorCodeOf(r), "bad_request") << r.raw;
    EXPECT_NE(r.body.find("plain HTTP request was sent to a TLS port"), std::string::npos)
        << r.body;
  }
  EXPECT_EQ(upstream_.requests(), 0);
  // The port still speaks TLS.
  EXPECT_EQ(CurlPost("tls-after-plain", {"--cacert", ca_.cert}).status, 201);
}

// ---- https upstreams: gateway A (plain) -> gateway B (TLS listener) -> FakeUpstream ----

class HttpsUpstreamTest : public TlsTest {
 protected:
  void TearDown() override {
    if (origin_.running()) {
      origin_.Kill(SIGKILL);
      origin_.Wait();
    }
  }

  // Starts gateway B with a TLS listener presenting `cert`, in front of the FakeUpstream.
  void StartTlsOrigin(const CertFiles& cert) {
    std::string config =
        "[listen]\naddress = \"127.0.0.1:0\"\ntls_cert = \"" + cert.cert + "\"\ntls_key = \"" +
        cert.key + "\"\n[upstream]\nurl = \"http://127.0.0.1:" + std::to_string(upstream_.port()) +
        "\"\n[store]\npath = \"" + origin_dir_.Path("data") +
        "\"\n[server]\nworkers = 1\n[log]\naccess = \"off\"\n[admin]\naddress = \"\"\n";
    std::string path = origin_dir_.WriteFile("origin.toml", config);
    ASSERT_TRUE(origin_.Start(IDEMGATE_BIN, {"--config", path})) << origin_.error();
    origin_port_ = origin_.WaitForPort();
    ASSERT_NE(origin_port_, 0) << origin_.log();
  }

  // Points gateway A at https://HOST:origin_port_ with `ca_file` and starts (or restarts) it.
  void StartFront(const std::string& host, const std::string& ca_file) {
    Set("upstream", "url", "\"https://" + host + ":" + std::to_string(origin_port_) + "\"");
    Set("upstream", "ca_file", "\"" + ca_file + "\"");
    Set("upstream", "connect_timeout", "\"2s\"");
    if (gateway_.running()) {
      gateway_.Kill(SIGTERM);
      ASSERT_TRUE(gateway_.Wait());
    }
    StartGateway();
  }

  void ExpectUnavailable(const std::string& key) {
    HttpResponse r = Post(key, kBody);
    ASSERT_EQ(r.status, 502) << r.raw << "\nA: " << gateway_.log();
    EXPECT_EQ(ErrorCodeOf(r.body), "upstream_unavailable") << r.body;
    EXPECT_FALSE(r.Header("Idempotent-Replayed").has_value());
  }

  TempDir origin_dir_;
  GatewayProcess origin_;
  uint16_t origin_port_ = 0;
};

TEST_F(HttpsUpstreamTest, TrustedCaCreatesThenReplays) {
  StartTlsOrigin(server_);
  StartFront("localhost", "ca.pem");  // relative to A's config directory
  HttpResponse first = Post("up-1", kBody);
  ASSERT_EQ(first.status, 201) << first.raw << "\nA: " << gateway_.log();
  EXPECT_EQ(first.body, kUpstreamBody);
  EXPECT_FALSE(first.Header("Idempotent-Replayed").has_value());
  ASSERT_EQ(upstream_.requests(), 1);
  EXPECT_EQ(upstream_.last_request()->body, kBody);

  HttpResponse again = Post("up-1", kBody);
  ASSERT_EQ(again.status, 201) << again.raw;
  EXPECT_EQ(again.Header("Idempotent-Replayed"), "true");
  EXPECT_EQ(again.body, first.body);
  EXPECT_EQ(upstream_.requests(), 1);

  // A second key goes over the (pooled or new) TLS upstream connection too.
  HttpResponse second = Post("up-2", kBody);
  ASSERT_EQ(second.status, 201) << second.raw;
  EXPECT_EQ(upstream_.requests(), 2);
}

TEST_F(HttpsUpstreamTest, WrongCaIs502AndTheKeyExecutesLaterWithTheRightCa) {
  StartTlsOrigin(server_);
  StartFront("localhost", wrong_ca_.cert);
  ExpectUnavailable("up-wrong");
  ExpectUnavailable("up-wrong");  // released: not 409 in_use, not a stored 502
  EXPECT_EQ(upstream_.requests(), 0);

  StartFront("localhost", ca_.cert);  // restart with the right CA, same store
  HttpResponse r = Post("up-wrong", kBody);
  ASSERT_EQ(r.status, 201) << r.raw << "\nA: " << gateway_.log();
  EXPECT_FALSE(r.Header("Idempotent-Replayed").has_value());
  EXPECT_EQ(upstream_.requests(), 1);
  HttpResponse replay = Post("up-wrong", kBody);
  EXPECT_EQ(replay.Header("Idempotent-Replayed"), "true");
  EXPECT_EQ(upstream_.requests(), 1);
}

TEST_F(HttpsUpstreamTest, SystemStoreDoesNotTrustTheTestCa) {
  StartTlsOrigin(server_);
  StartFront("localhost", "");  // ca_file empty: the system CA store
  ExpectUnavailable("up-system");
  EXPECT_EQ(upstream_.requests(), 0);
}

TEST_F(HttpsUpstreamTest, IpAddressUrlVerifiesAgainstTheIpSan) {
  StartTlsOrigin(server_);
  StartFront("127.0.0.1", ca_.cert);
  HttpResponse r = Post("up-ip", kBody);
  ASSERT_EQ(r.status, 201) << r.raw << "\nA: " << gateway_.log();
  EXPECT_EQ(upstream_.requests(), 1);
}

TEST_F(HttpsUpstreamTest, CertificateWithoutTheNameIs502) {
  StartTlsOrigin(other_);  // trusted CA, but only DNS:other.example
  StartFront("localhost", ca_.cert);
  ExpectUnavailable("up-name");
  EXPECT_EQ(upstream_.requests(), 0);
  EXPECT_TRUE(
      gateway_.WaitForOutput("WARN upstream: upstream unavailable: TLS certificate "
                             "verification failed for localhost: hostname mismatch"))
      << gateway_.log();
  StartFront("127.0.0.1", ca_.cert);  // no IP SAN either
  ExpectUnavailable("up-name");
  EXPECT_EQ(upstream_.requests(), 0);
  EXPECT_TRUE(gateway_.WaitForOutput(
      "TLS certificate verification failed for 127.0.0.1: IP address mismatch"))
      << gateway_.log();
}

// A certificate the gateway does not trust: the log and the access log say why, and /readyz
// is not green (it completes a verified handshake, not just a TCP connect). With the right CA,
// /readyz is green.
TEST_F(HttpsUpstreamTest, VerificationFailureIsLoggedAndReadyzSaysWhy) {
  StartTlsOrigin(server_);
  Set("admin", "address", "\"127.0.0.1:0\"");
  Set("log", "access", "\"" + dir_.Path("access.log") + "\"");
  StartFront("localhost", wrong_ca_.cert);
  uint16_t admin = gateway_.WaitForPort("admin listening on ");
  ASSERT_NE(admin, 0) << gateway_.log();
  ExpectUnavailable("up-why");
  const std::string why = "TLS certificate verification failed for localhost: ";
  EXPECT_TRUE(gateway_.WaitForOutput("WARN upstream: upstream unavailable: " + why))
      << gateway_.log();
  std::string log = AccessLogWhen([](const std::string& text) {
    return text.find("upstream_unavailable") != std::string::npos;
  });
  EXPECT_NE(log.find("\"error\":\"upstream_unavailable\",\"error_detail\":\"" + why),
            std::string::npos)
      << log;

  HttpResponse ready = TestClient(admin).Request("GET", "/readyz");
  EXPECT_EQ(ready.status, 503) << ready.raw;
  EXPECT_NE(
      ready.body.find("\"upstream\":\"localhost:" + std::to_string(origin_port_) + ": " + why),
      std::string::npos)
      << ready.body;
  EXPECT_NE(ready.body.find("\"store\":\"ok\""), std::string::npos) << ready.body;

  StartFront("localhost", ca_.cert);
  admin = gateway_.WaitForPort("admin listening on ");
  HttpResponse green = TestClient(admin).Request("GET", "/readyz");
  EXPECT_EQ(green.status, 200) << green.raw;
  EXPECT_EQ(upstream_.requests(), 0);  // the probes never sent a request
}

// An https upstream that accepts TCP but never answers the TLS handshake (a listener that never
// accepts: the kernel completes the TCP handshake): a handshake timeout, not a "connect timeout",
// in the log; /readyz says so too.
TEST_F(GatewayTest, HttpsUpstreamThatNeverHandshakesIsAHandshakeTimeout) {
  uint16_t bound = 0;
  UniqueFd listener = BindLoopback(&bound);
  ASSERT_TRUE(listener.valid());
  ASSERT_EQ(listen(listener.get(), 16), 0);
  const std::string port = std::to_string(bound);
  Set("upstream", "url", "\"https://127.0.0.1:" + port + "\"");
  Set("upstream", "connect_timeout", "\"500ms\"");
  StartWithAdmin();

  HttpResponse r = Post("hs-1", kBody);
  EXPECT_EQ(r.status, 502) << r.raw;
  EXPECT_EQ(ErrorCodeOf(r.body), "upstream_unavailable") << r.body;
  EXPECT_TRUE(gateway_.WaitForOutput("WARN upstream: upstream unavailable: TLS handshake timeout"))
      << gateway_.log();
  HttpResponse ready = TestClient(admin_port_).Request("GET", "/readyz");
  EXPECT_EQ(ready.status, 503) << ready.raw;
  EXPECT_NE(
      ready.body.find("\"upstream\":\"127.0.0.1:" + port + ": no TLS handshake within 500ms\""),
      std::string::npos)
      << ready.body;
}

// An https group: a server whose TLS handshake fails (its certificate lacks the name) never got
// the request (R3), so the call goes to the group's other server; the failing one is taken out.
TEST_F(HttpsUpstreamTest, GroupRetriesAFailedHandshakeOnAnotherServer) {
  StartTlsOrigin(server_);
  const uint16_t good_port = origin_port_;
  TempDir bad_dir;
  GatewayProcess bad;
  std::string bad_config =
      "[listen]\naddress = \"127.0.0.1:0\"\ntls_cert = \"" + other_.cert + "\"\ntls_key = \"" +
      other_.key + "\"\n[upstream]\nurl = \"http://127.0.0.1:" + std::to_string(upstream_.port()) +
      "\"\n[store]\npath = \"" + bad_dir.Path("data") +
      "\"\n[server]\nworkers = 1\n[log]\naccess = \"off\"\n[admin]\naddress = \"\"\n";
  ASSERT_TRUE(bad.Start(IDEMGATE_BIN, {"--config", bad_dir.WriteFile("bad.toml", bad_config)}));
  const uint16_t bad_port = bad.WaitForPort();
  ASSERT_NE(bad_port, 0) << bad.log();
  sections_["upstream"].erase("url");
  Set("upstream", "servers",
      "[\"https://localhost:" + std::to_string(bad_port) +
          "\", \"https://localhost:" + std::to_string(good_port) + "\"]");
  Set("upstream", "ca_file", "\"" + ca_.cert + "\"");
  Set("server", "workers", "1");
  StartGateway();
  for (int i = 0; i < 4; ++i) {
    HttpResponse r = Post("up-group-" + std::to_string(i), kBody);
    ASSERT_EQ(r.status, 201) << r.raw << "\nA: " << gateway_.log();
  }
  EXPECT_EQ(upstream_.requests(), 4);
  EXPECT_TRUE(gateway_.WaitForOutput("taken out")) << gateway_.log();
  bad.Kill(SIGKILL);
  bad.Wait();
}

}  // namespace
}  // namespace idemgate::test
