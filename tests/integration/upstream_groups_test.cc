// SPDX-License-Identifier: Apache-2.0
// Through the real binary: an upstream group of several fake servers. A server that refuses
// connections is taken out and the request goes to another (no client sees an error for a
// request that reached no server); a guarded request sent to a server that then resets is stored
// (R4) and never retried elsewhere; a dead server comes back; a failing health check takes a
// server out; a DNS change is picked up; least_conn; the Host override; /readyz.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <future>
#include <thread>

#include "tests/integration/gateway_fixture.h"
#include "tests/support/loopback.h"
#include "tests/support/temp_dir.h"

namespace idemgate::test {
namespace {

using std::chrono::steady_clock;
constexpr auto kWait = std::chrono::seconds(10);

std::string Url(uint16_t port, const std::string& host = "127.0.0.1") {
  return "\"http://" + host + ":" + std::to_string(port) + "\"";
}

// A loopback port bound but not listening: every connection to it is refused, and no other
// process takes the port while the test holds it.
class RefusingPort {
 public:
  RefusingPort() { fd_ = BindLoopback(&port_).Release(); }
  ~RefusingPort() { Release(); }
  void Release() {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
  }
  uint16_t port() const { return port_; }

 private:
  int fd_ = -1;
  uint16_t port_ = 0;
};

// Requests a fake upstream received, other than health checks.
int Calls(const FakeUpstream& server) {
  int n = 0;
  for (const RecordedRequest& r : server.received()) n += r.target != "/health" ? 1 : 0;
  return n;
}

class UpstreamGroupTest : public GatewayTest {
 protected:
  void SetUp() override {
    GatewayTest::SetUp();
    ASSERT_TRUE(b_.Start());
    b_.SetBehavior(UpstreamBehavior::Respond(201, R"({"id":"pi_b"})"));
    sections_["upstream"].erase("url");
    Set("upstream", "connect_timeout", "\"1s\"");
    Set("upstream", "fail_timeout", "\"1h\"");
  }

  void Servers(const std::vector<uint16_t>& ports) {
    std::string list = "[";
    for (uint16_t port : ports) list += (list.size() > 1 ? ", " : "") + Url(port);
    Set("upstream", "servers", list + "]");
  }

  HttpResponse Get(std::string_view target = "/v1/things", HeaderList headers = kMerchant) {
    TestClient client(port_);
    return client.Request("GET", target, headers);
  }

  FakeUpstream b_;
};

// One server of three refuses connections: every request, passthrough or guarded, is answered
// by the other two; the refused one never executed anything.
TEST_F(UpstreamGroupTest, ServerDownNoClientSeesAnError) {
  RefusingPort down;
  Servers({upstream_.port(), down.port(), b_.port()});
  StartGateway();
  for (int i = 0; i < 12; ++i) {
    HttpResponse get = Get();
    ASSERT_EQ(get.status, 201) << get.raw;
    HttpResponse post = Post("k-down-" + std::to_string(i), R"({"amount":"1"})");
    ASSERT_EQ(post.status, 201) << post.raw;
  }
  EXPECT_EQ(upstream_.requests() + b_.requests(), 24);
  EXPECT_GT(upstream_.requests(), 0);
  EXPECT_GT(b_.requests(), 0);
}

// Every server of the group refuses: the client gets 502 upstream_unavailable (nothing was
// sent, R3) and a guarded key is free for a retry.
TEST_F(UpstreamGroupTest, AllServersDownIsUnavailable) {
  RefusingPort d1, d2;
  Servers({d1.port(), d2.port()});
  StartGateway();
  HttpResponse post = Post("k-all-down", R"({"amount":"1"})");
  EXPECT_EQ(post.status, 502) << post.raw;
  EXPECT_EQ(ErrorCodeOf(post), "upstream_unavailable") << post.body;
  // Nothing was stored: the retry is a new attempt (no replay of the 502).
  HttpResponse retry = Post("k-all-down", R"({"amount":"1"})");
  EXPECT_EQ(retry.status, 502) << retry.raw;
  EXPECT_EQ(ErrorCodeOf(retry), "upstream_unavailable") << retry.body;
  EXPECT_FALSE(retry.Header("Idempotent-Replayed").has_value()) << retry.raw;
}

// R4: a guarded request that reached a server which then reset is stored as the result and
// never sent to another server, even though the group has a healthy one and one that refuses.
TEST_F(UpstreamGroupTest, GuardedRequestResetAfterSendIsStoredNeverRetriedElsewhere) {
  RefusingPort down;
  upstream_.SetBehavior(UpstreamBehavior::Act(UpstreamAction::kResetAfterRequest));
  b_.SetBehavior(UpstreamBehavior::Act(UpstreamAction::kResetAfterRequest));
  Servers({down.port(), upstream_.port(), b_.port()});
  StartGateway();
  HttpResponse first = Post("k-reset", R"({"amount":"1"})");
  ASSERT_EQ(first.status, 502) << first.raw;
  EXPECT_EQ(ErrorCodeOf(first), "upstream_failed") << first.body;
  EXPECT_EQ(upstream_.requests() + b_.requests(), 1);
  // Both servers answer now; the retry still replays the stored outcome, executing nothing.
  upstream_.SetBehavior(UpstreamBehavior::Respond(201, "{}"));
  b_.SetBehavior(UpstreamBehavior::Respond(201, "{}"));
  for (int i = 0; i < 3; ++i) {
    HttpResponse retry = Post("k-reset", R"({"amount":"1"})");
    EXPECT_EQ(retry.status, 502) << retry.raw;
    EXPECT_EQ(retry.Header("Idempotent-Replayed"), "true");
  }
  EXPECT_EQ(upstream_.requests() + b_.requests(), 1);
}

// A server that was down comes back on its port: after fail_timeout it gets requests again.
TEST_F(UpstreamGroupTest, DeadServerReturns) {
  Set("server", "workers", "1");
  Set("upstream", "fail_timeout", "\"200ms\"");
  FakeUpstream c;
  ASSERT_TRUE(c.Start());
  const uint16_t c_port = c.port();
  c.Stop();  // refused from now on
  Servers({upstream_.port(), c_port});
  StartGateway();
  for (int i = 0; i < 4; ++i) ASSERT_EQ(Get().status, 201);
  EXPECT_EQ(upstream_.requests(), 4);
  ASSERT_TRUE(c.Start("127.0.0.1", c_port));
  c.SetBehavior(UpstreamBehavior::Respond(200, "back"));
  const auto deadline = steady_clock::now() + kWait;
  while (c.requests() == 0 && steady_clock::now() < deadline) ASSERT_EQ(Get().status / 100, 2);
  EXPECT_GT(c.requests(), 0) << gateway_.log();
  EXPECT_TRUE(gateway_.WaitForOutput("is back (a call reached it)")) << gateway_.log();
}

// Active health checks: a server whose health path fails is taken out (no client request goes
// there) and brought back once it passes again.
TEST_F(UpstreamGroupTest, FailedHealthCheckTakesServerOutUntilItPasses) {
  Set("server", "workers", "1");
  Set("upstream", "health_path", "\"/health\"");
  Set("upstream", "health_interval", "\"100ms\"");
  b_.SetBehavior(UpstreamBehavior::Respond(503, "sick"));
  Servers({upstream_.port(), b_.port()});
  StartGateway();
  ASSERT_TRUE(gateway_.WaitForOutput("taken out: health check /health failed: status 503"))
      << gateway_.log();
  for (int i = 0; i < 6; ++i) ASSERT_EQ(Get().status, 201);
  EXPECT_EQ(Calls(b_), 0);
  ASSERT_GT(b_.requests(), 0);  // its health checks, a GET to the server's own host:port
  const RecordedRequest check = b_.received().front();
  EXPECT_EQ(check.method + " " + check.target, "GET /health");
  EXPECT_EQ(check.Header("Host"), "127.0.0.1:" + std::to_string(b_.port()));
  b_.SetBehavior(UpstreamBehavior::Respond(200, "well"));
  ASSERT_TRUE(gateway_.WaitForOutput("is back (health check /health: 200)")) << gateway_.log();
  const auto deadline = steady_clock::now() + kWait;
  while (Calls(b_) == 0 && steady_clock::now() < deadline) ASSERT_EQ(Get().status / 100, 2);
  EXPECT_GT(Calls(b_), 0);
}

// A server name is resolved again every resolve_interval: an address it gains becomes a server,
// one it loses gets no more requests. The name comes from a test hosts file (tests/support/
// hosts_shim.c, LD_PRELOAD into the gateway), rewritten by the test.
TEST_F(UpstreamGroupTest, DnsChangeIsPickedUp) {
  Set("server", "workers", "1");
  FakeUpstream moved;
  ASSERT_TRUE(moved.Start("127.0.0.2", upstream_.port()));
  moved.SetBehavior(UpstreamBehavior::Respond(200, "moved"));
  const std::string hosts = dir_.WriteFile("hosts", "127.0.0.1 api.groups.test\n");
  Set("upstream", "url", Url(upstream_.port(), "api.groups.test"));
  Set("upstream", "resolve_interval", "\"100ms\"");
  std::string path = dir_.WriteFile("idemgate.toml", ConfigText());
  ASSERT_TRUE(gateway_.Start(
      IDEMGATE_BIN, {"--config", path},
      {"LD_PRELOAD=" HOSTS_SHIM, "IDEMGATE_TEST_HOSTS=" + hosts, PreloadAsanOptions()}))
      << gateway_.error();
  port_ = gateway_.WaitForPort();
  ASSERT_NE(port_, 0) << gateway_.log();
  ASSERT_EQ(Get().status, 201);
  EXPECT_EQ(moved.requests(), 0);
  // The name gains a second address: both get requests.
  dir_.WriteFile("hosts", "127.0.0.1 api.groups.test\n127.0.0.2 api.groups.test\n");
  auto deadline = steady_clock::now() + kWait;
  while (moved.requests() == 0 && steady_clock::now() < deadline) ASSERT_EQ(Get().status / 100, 2);
  ASSERT_GT(moved.requests(), 0) << gateway_.log();
  const int first_before = upstream_.requests();
  for (int i = 0; i < 4; ++i) ASSERT_EQ(Get().status / 100, 2);
  EXPECT_EQ(upstream_.requests() - first_before, 2);  // round robin over the two addresses
  // It loses the first one: from then on every request goes to the second (one worker).
  dir_.WriteFile("hosts", "127.0.0.2 api.groups.test\n");
  ASSERT_TRUE(gateway_.WaitForOutput("no longer resolves to address 127.0.0.1")) << gateway_.log();
  const int old_requests = upstream_.requests();
  for (int i = 0; i < 5; ++i) EXPECT_EQ(Get().status, 200);
  EXPECT_EQ(upstream_.requests(), old_requests);
}

// least_conn: while one server holds a slow request, new requests go to the other one.
TEST_F(UpstreamGroupTest, LeastConnAvoidsTheBusyServer) {
  Set("server", "workers", "1");
  Set("upstream", "balance", "\"least_conn\"");
  upstream_.SetBehavior(UpstreamBehavior::Respond(200, "slow").WithDelay(6000));
  b_.SetBehavior(UpstreamBehavior::Respond(200, "slow").WithDelay(6000));
  Servers({upstream_.port(), b_.port()});
  StartGateway();
  auto slow = std::async(std::launch::async, [this] {
    TestClient client(port_);
    return client.Request("GET", "/slow", kMerchant, {}, std::chrono::seconds(20));
  });
  const auto deadline = steady_clock::now() + kWait;
  while (upstream_.requests() + b_.requests() == 0 && steady_clock::now() < deadline) {
    std::this_thread::yield();
  }
  ASSERT_EQ(upstream_.requests() + b_.requests(), 1);
  const bool a_busy = upstream_.requests() == 1;
  upstream_.SetBehavior(UpstreamBehavior::Respond(200, "fast"));
  b_.SetBehavior(UpstreamBehavior::Respond(200, "fast"));
  for (int i = 0; i < 6; ++i) ASSERT_EQ(Get().status, 200);
  EXPECT_EQ((a_busy ? upstream_ : b_).requests(), 1);
  EXPECT_EQ((a_busy ? b_ : upstream_).requests(), 6);
  EXPECT_EQ(slow.get().status, 200);
}

// Round robin (the default) spreads requests over the servers.
TEST_F(UpstreamGroupTest, RoundRobinSpreadsRequests) {
  Set("server", "workers", "1");
  Servers({upstream_.port(), b_.port()});
  StartGateway();
  for (int i = 0; i < 6; ++i) ASSERT_EQ(Get().status / 100, 2);
  EXPECT_EQ(upstream_.requests(), 3);
  EXPECT_EQ(b_.requests(), 3);
}

// upstream.host replaces the client's Host; without it the client's Host goes through.
TEST_F(UpstreamGroupTest, HostOverride) {
  Set("upstream", "url", Url(upstream_.port()));
  sections_["upstream"].erase("servers");
  Set("upstream", "host", "\"api.example.com\"");
  StartGateway();
  HeaderList headers = kMerchant;
  headers.emplace_back("Host", "client.example.org");
  ASSERT_EQ(Get("/v1/things", headers).status, 201);
  ASSERT_TRUE(upstream_.last_request().has_value());
  EXPECT_EQ(upstream_.last_request()->Header("Host"), "api.example.com");
  EXPECT_EQ(upstream_.last_request()->HeaderCount("Host"), 1);
}

TEST_F(UpstreamGroupTest, ClientHostGoesThroughWithoutOverride) {
  Set("upstream", "url", Url(upstream_.port()));
  StartGateway();
  HeaderList headers = kMerchant;
  headers.emplace_back("Host", "client.example.org");
  ASSERT_EQ(Get("/v1/things", headers).status, 201);
  EXPECT_EQ(upstream_.last_request()->Header("Host"), "client.example.org");
}

// /readyz: ready while at least one server of the default group takes connections.
TEST_F(UpstreamGroupTest, ReadyWhileOneServerIsUp) {
  RefusingPort down;
  Servers({down.port(), upstream_.port()});
  StartWithAdmin();
  HttpResponse ready = TestClient(admin_port_).Request("GET", "/readyz");
  EXPECT_EQ(ready.status, 200) << ready.body;
  upstream_.Stop();
  HttpResponse not_ready = TestClient(admin_port_).Request("GET", "/readyz");
  EXPECT_EQ(not_ready.status, 503) << not_ready.body;
}

// Named groups start with the gateway (each worker builds them) while [upstream] stays the
// default; a reload that changes them says they wait for a restart.
TEST_F(UpstreamGroupTest, NamedGroupsStartAndAreRestartOnly) {
  Set("upstream", "url", Url(upstream_.port()));
  Set("upstreams.internal", "servers", "[" + Url(b_.port()) + "]");
  StartGateway();
  ASSERT_EQ(Get().status, 201);
  EXPECT_EQ(upstream_.requests(), 1);
  EXPECT_EQ(b_.requests(), 0);
  Set("upstreams.internal", "servers", "[" + Url(b_.port()) + ", " + Url(upstream_.port()) + "]");
  dir_.WriteFile("idemgate.toml", ConfigText());
  ASSERT_TRUE(gateway_.Kill(SIGHUP));
  EXPECT_TRUE(gateway_.WaitForOutput("upstreams (named upstream groups) changed"))
      << gateway_.log();
  EXPECT_EQ(Get().status, 201);
}

// --check-config resolves every server of every group and names the one that does not resolve.
TEST(UpstreamGroupCheck, CheckConfigResolvesEveryServer) {
  TempDir dir;
  const std::string store = "[store]\npath = \"" + dir.Path("data") + "\"\n";
  std::string good = dir.WriteFile(
      "good.toml", store +
                       "[upstream]\nservers = [\"http://127.0.0.1:1\", \"http://localhost:2\"]\n"
                       "[upstreams.internal]\nurl = \"http://127.0.0.1:3\"\n");
  RunResult ok = RunGateway({"--check-config", "--config", good});
  EXPECT_EQ(ok.code, 0) << ok.output;
  std::string bad =
      dir.WriteFile("bad.toml", store +
                                    "[upstream]\nurl = \"http://127.0.0.1:1\"\n"
                                    "[upstreams.internal]\nservers = [\"http://127.0.0.1:3\", "
                                    "\"http://no-such-host.invalid:80\"]\n");
  RunResult r = RunGateway({"--check-config", "--config", bad});
  EXPECT_NE(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("upstreams.internal.servers"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("no-such-host.invalid"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace idemgate::test
