// SPDX-License-Identifier: Apache-2.0
// Through the real binary: listen.proxy_protocol (a PROXY v1 or v2 header written by hand, and
// HAProxy's send-proxy / send-proxy-v2 in front as a real balancer) puts the client it names in
// the access log and in the X-Forwarded-For sent upstream; a connection without a valid header
// is closed unanswered; v2 LOCAL keeps the peer. listen.trusted_proxies: the X-Forwarded-For of
// a trusted peer is believed, anyone else's is not.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "tests/integration/gateway_fixture.h"
#include "tests/support/loopback.h"
#include "tests/support/tls_tools.h"

namespace idemgate::test {
namespace {

const std::string kV2Sig("\r\n\r\n\0\r\nQUIT\n", 12);

std::string V2(unsigned char ver_cmd, unsigned char fam, const std::string& payload) {
  std::string h = kV2Sig;
  h += static_cast<char>(ver_cmd);
  h += static_cast<char>(fam);
  h += static_cast<char>(payload.size() >> 8);
  h += static_cast<char>(payload.size() & 0xff);
  return h + payload;
}

std::string Get(const std::string& target, const std::string& extra = "") {
  return "GET " + target + " HTTP/1.1\r\nHost: api.test\r\nAuthorization: Bearer m\r\n" + extra +
         "Connection: close\r\n\r\n";
}

class ProxyProtocolTest : public GatewayTest {
 protected:
  void SetUp() override {
    GatewayTest::SetUp();
    Set("log", "access", "\"" + dir_.Path("access.log") + "\"");
  }
  // Sends `bytes` on a new connection; the answer, or status 0 when the gateway closed.
  HttpResponse Send(const std::string& bytes) {
    TestClient client(port_);
    EXPECT_TRUE(client.SendRaw(bytes));
    return client.ReadResponse();
  }
  // The X-Forwarded-For of the upstream's last request.
  std::string UpstreamXff() {
    auto last = upstream_.last_request();
    return last ? last->Header("X-Forwarded-For").value_or("(none)") : "(no request)";
  }
  bool Logged(const std::string& client_ip) {
    const std::string needle = "\"client_ip\":\"" + client_ip + "\"";
    return AccessLogWhen([&](const std::string& t) {
             return t.find(needle) != std::string::npos;
           }).find(needle) != std::string::npos;
  }
};

TEST_F(ProxyProtocolTest, V1AndV2NameTheClient) {
  Set("listen", "proxy_protocol", "true");
  StartGateway();
  HttpResponse v1 = Send("PROXY TCP4 198.51.100.7 127.0.0.1 40000 8080\r\n" + Get("/v1/a"));
  EXPECT_EQ(v1.status, 201) << v1.raw;
  EXPECT_EQ(UpstreamXff(), "198.51.100.7");
  EXPECT_TRUE(Logged("198.51.100.7")) << dir_.ReadFile("access.log");

  std::string addrs;
  for (int b : {203, 0, 113, 9, 127, 0, 0, 1, 0x9c, 0x40, 0x1f, 0x90})
    addrs += static_cast<char>(b);
  HttpResponse v2 = Send(V2(0x21, 0x11, addrs) + Get("/v1/b"));
  EXPECT_EQ(v2.status, 201) << v2.raw;
  EXPECT_EQ(UpstreamXff(), "203.0.113.9");
  EXPECT_TRUE(Logged("203.0.113.9"));

  HttpResponse v6 = Send("PROXY TCP6 2001:db8::5 ::1 1 2\r\n" + Get("/v1/c"));
  EXPECT_EQ(v6.status, 201) << v6.raw;
  EXPECT_EQ(UpstreamXff(), "2001:db8::5");

  // LOCAL (a balancer's own health check) and UNKNOWN: the peer stays the client.
  HttpResponse local = Send(V2(0x20, 0x00, "") + Get("/v1/d"));
  EXPECT_EQ(local.status, 201) << local.raw;
  EXPECT_EQ(UpstreamXff(), "127.0.0.1");
  HttpResponse unknown = Send("PROXY UNKNOWN\r\n" + Get("/v1/e"));
  EXPECT_EQ(unknown.status, 201) << unknown.raw;
  EXPECT_EQ(UpstreamXff(), "127.0.0.1");
  EXPECT_EQ(upstream_.requests(), 5);
}

// The header in pieces: the gateway waits for the rest, and the request after it is whole.
TEST_F(ProxyProtocolTest, AHeaderInPiecesIsWaitedFor) {
  Set("listen", "proxy_protocol", "true");
  StartGateway();
  TestClient client(port_);
  const std::string all = "PROXY TCP4 198.51.100.8 127.0.0.1 40000 8080\r\n" + Get("/v1/p");
  for (size_t at = 0; at < all.size(); at += 7) {
    ASSERT_TRUE(client.SendRaw(all.substr(at, 7)));
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  HttpResponse r = client.ReadResponse();
  EXPECT_EQ(r.status, 201) << r.raw;
  EXPECT_EQ(UpstreamXff(), "198.51.100.8");
}

// Without a valid header the connection is closed with no answer and nothing goes upstream.
TEST_F(ProxyProtocolTest, NoValidHeaderIsClosed) {
  Set("listen", "proxy_protocol", "true");
  StartWithAdmin();
  for (const std::string& bad : {Get("/v1/x"), std::string("PROXY TCP4 1.2.3.4 5.6.7.8 1\r\n"),
                                 V2(0x21, 0x11, "short"), V2(0x21, 0x11, std::string(3000, 'x')),
                                 std::string("PROXY UNKNOWN ") + std::string(120, 'y')}) {
    TestClient client(port_);
    ASSERT_TRUE(client.SendRaw(bad + Get("/v1/y")));
    EXPECT_TRUE(client.IsClosed()) << bad.substr(0, 20);
    HttpResponse none = client.ReadResponse(std::chrono::milliseconds(200));
    EXPECT_EQ(none.status, 0) << none.raw;
  }
  EXPECT_EQ(upstream_.requests(), 0);
  EXPECT_EQ(Metric("idemgate_connections_closed_total{reason=\"bad_proxy_header\"}"), 5);
  EXPECT_TRUE(gateway_.WaitForOutput("no PROXY protocol header")) << gateway_.log();
}

// Off (the default), a PROXY line is not a request: 400, the connection's peer is the client.
TEST_F(ProxyProtocolTest, OffAPROXYLineIsABadRequest) {
  StartGateway();
  HttpResponse r = Send("PROXY TCP4 198.51.100.7 127.0.0.1 40000 8080\r\n" + Get("/v1/a"));
  EXPECT_EQ(r.status, 400) << r.raw;
  EXPECT_EQ(upstream_.requests(), 0);
}

TEST_F(ProxyProtocolTest, TrustedProxiesXffIsBelieved) {
  Set("listen", "trusted_proxies", "[\"127.0.0.0/8\", \"10.0.0.0/8\"]");
  StartGateway();
  HttpResponse r = Send(Get("/v1/t", "X-Forwarded-For: 203.0.113.50, 10.1.1.1\r\n"));
  EXPECT_EQ(r.status, 201) << r.raw;
  // The trusted hops are cut: the upstream sees the chain up to the client, the client last.
  EXPECT_EQ(UpstreamXff(), "203.0.113.50");
  EXPECT_TRUE(Logged("203.0.113.50")) << dir_.ReadFile("access.log");
  // Entries left of the client stay; a spoofed one left of it is the client's own claim.
  r = Send(Get("/v1/t", "X-Forwarded-For: 192.0.2.1\r\nX-Forwarded-For: 198.51.100.3\r\n"));
  EXPECT_EQ(UpstreamXff(), "192.0.2.1, 198.51.100.3");
  EXPECT_TRUE(Logged("198.51.100.3"));
  // A guarded request too.
  HttpResponse post =
      Post("k-xff-1", "{}", "/v1/payment_intents",
           {{"Authorization", "Bearer merchant-demo"}, {"X-Forwarded-For", "203.0.113.51"}});
  EXPECT_EQ(post.status, 201) << post.raw;
  EXPECT_EQ(UpstreamXff(), "203.0.113.51");
  EXPECT_TRUE(Logged("203.0.113.51"));
}

TEST_F(ProxyProtocolTest, AnUntrustedPeersXffIsNotBelieved) {
  Set("listen", "trusted_proxies", "[\"10.0.0.0/8\"]");  // not the test's 127.0.0.1
  StartGateway();
  HttpResponse r = Send(Get("/v1/u", "X-Forwarded-For: 203.0.113.60\r\n"));
  EXPECT_EQ(r.status, 201) << r.raw;
  EXPECT_EQ(UpstreamXff(), "203.0.113.60, 127.0.0.1");  // passed on, the peer appended
  EXPECT_TRUE(Logged("127.0.0.1"));
  EXPECT_EQ(dir_.ReadFile("access.log").find("203.0.113.60"), std::string::npos);
}

TEST_F(ProxyProtocolTest, ABadTrustedProxiesEntryIsAConfigError) {
  Set("listen", "trusted_proxies", "[\"10.0.0.1/8\", \"nonsense\"]");
  const std::string path = dir_.WriteFile("idemgate.toml", ConfigText());
  RunResult r = RunGateway({"--check-config", "--config", path});
  EXPECT_NE(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("listen.trusted_proxies"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("10.0.0.1/8"), std::string::npos) << r.output;
}

// HAProxy in TCP mode in front, as a real balancer: the client connects to it from 127.0.0.2,
// and the gateway sees 127.0.0.2 through send-proxy (v1) and send-proxy-v2.
class HaproxyInFront {
 public:
  bool Start(const TempDir& dir, uint16_t gateway_port, const char* option, std::string* error) {
    int fd = BindLoopback(&port_).Release();
    close(fd);  // haproxy binds it next (a race with another test is unlikely on loopback)
    const std::string cfg = dir.WriteFile(
        "haproxy-" + std::to_string(port_) + ".cfg",
        "global\n  maxconn 64\ndefaults\n  mode tcp\n  timeout connect 2s\n  timeout client 10s\n"
        "  timeout server 10s\nlisten front\n  bind 127.0.0.1:" +
            std::to_string(port_) + "\n  server gw 127.0.0.1:" + std::to_string(gateway_port) +
            " " + option + "\n");
    if (!process_.Start("/usr/sbin/haproxy", {"-db", "-f", cfg})) {
      *error = process_.error();
      return false;
    }
    for (int i = 0; i < 200; ++i) {  // until it accepts
      int s = socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_port = htons(port_);
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      const bool up = connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
      close(s);
      if (up) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    *error = "haproxy did not listen: " + process_.log();
    return false;
  }
  // One request from 127.0.0.2 through haproxy; the raw answer.
  std::string Request(const std::string& bytes) {
    int s = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in src{};
    src.sin_family = AF_INET;
    inet_pton(AF_INET, "127.0.0.2", &src.sin_addr);
    sockaddr_in dst{};
    dst.sin_family = AF_INET;
    dst.sin_port = htons(port_);
    dst.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    std::string out;
    timeval tv{5, 0};
    setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    if (bind(s, reinterpret_cast<sockaddr*>(&src), sizeof src) == 0 &&
        connect(s, reinterpret_cast<sockaddr*>(&dst), sizeof dst) == 0 &&
        write(s, bytes.data(), bytes.size()) == static_cast<ssize_t>(bytes.size())) {
      char buf[4096];
      for (ssize_t n; (n = read(s, buf, sizeof buf)) > 0;) out.append(buf, n);
    }
    close(s);
    return out;
  }

 private:
  GatewayProcess process_;
  uint16_t port_ = 0;
};

TEST_F(ProxyProtocolTest, BehindHaproxySendProxyV1AndV2) {
  Set("listen", "proxy_protocol", "true");
  StartGateway();
  for (const char* option : {"send-proxy", "send-proxy-v2"}) {
    HaproxyInFront haproxy;
    std::string error;
    ASSERT_TRUE(haproxy.Start(dir_, port_, option, &error)) << error;
    const std::string answer = haproxy.Request(Get(std::string("/v1/h-") + option));
    EXPECT_EQ(answer.substr(0, 12), "HTTP/1.1 201") << option << ": " << answer;
    EXPECT_EQ(UpstreamXff(), "127.0.0.2") << option;
  }
  EXPECT_TRUE(Logged("127.0.0.2"));
  EXPECT_EQ(upstream_.requests(), 2);
}

// On a TLS port the header comes first, then the TLS handshake (HAProxy: send-proxy-v2 ssl).
TEST_F(ProxyProtocolTest, BeforeTlsBehindHaproxy) {
  std::string error;
  auto ca = MakeTestCa(dir_, "ca", &error);
  ASSERT_TRUE(ca) << error;
  auto cert = MakeTestServerCert(dir_, "gw", *ca, "localhost", "DNS:localhost", &error);
  ASSERT_TRUE(cert) << error;
  Set("listen", "tls_cert", "\"" + cert->cert + "\"");
  Set("listen", "tls_key", "\"" + cert->key + "\"");
  Set("listen", "proxy_protocol", "true");
  StartGateway();
  HaproxyInFront haproxy;
  ASSERT_TRUE(haproxy.Start(dir_, port_, "send-proxy-v2 ssl verify none", &error)) << error;
  const std::string answer = haproxy.Request(Get("/v1/tls"));
  EXPECT_EQ(answer.substr(0, 12), "HTTP/1.1 201") << answer << "\n" << gateway_.log();
  EXPECT_EQ(UpstreamXff(), "127.0.0.2");
  auto last = upstream_.last_request();
  ASSERT_TRUE(last);
  EXPECT_EQ(last->Header("X-Forwarded-Proto").value_or(""), "https");
}

}  // namespace
}  // namespace idemgate::test
