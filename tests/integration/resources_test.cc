// SPDX-License-Identifier: Apache-2.0
// Through the real binary: the gateway's share of the host's resources. A second instance on
// the same address refuses to start; the descriptor limit, max_connections and the budget of
// unsent answers keep it up and cheap; a paused process still reads answers that arrived.
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>
#include <thread>

#include "tests/integration/gateway_fixture.h"
#include "tests/support/loopback.h"

namespace idemgate::test {
namespace {

using namespace std::chrono_literals;

// CPU time (user + system) `pid` has used so far, in seconds; -1 when unreadable.
double CpuSeconds(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  size_t paren = stat.rfind(')');  // the command name may hold spaces
  if (paren == std::string::npos) return -1;
  std::istringstream fields(stat.substr(paren + 2));
  std::string field;
  unsigned long long utime = 0, stime = 0;
  for (int i = 3; i <= 15 && fields >> field; ++i) {  // fields 14 and 15 of proc(5)
    if (i == 14) utime = std::stoull(field);
    if (i == 15) stime = std::stoull(field);
  }
  return static_cast<double>(utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

// A connection that sends `request` and then never reads (a small receive buffer, so the
// gateway's writes back up at once).
UniqueFd SendAndNeverRead(uint16_t port, const std::string& request) {
  UniqueFd fd = ConnectLoopback(port, 0, 16 << 10);
  if (!fd.valid()) return fd;
  if (send(fd.get(), request.data(), request.size(), MSG_NOSIGNAL) !=
      static_cast<ssize_t>(request.size())) {
    return UniqueFd();
  }
  return fd;
}

class ResourcesTest : public GatewayTest {
 protected:
  // Starts the gateway under `ulimit -n <nofile>` (soft and hard), through bash.
  void StartWithFileLimit(int nofile) {
    std::string path = dir_.WriteFile("idemgate.toml", ConfigText());
    std::string script = "ulimit -n " + std::to_string(nofile) + " && exec \"$0\" --config \"$1\"";
    ASSERT_TRUE(gateway_.Start("/bin/bash", {"-c", script, IDEMGATE_BIN, path}))
        << gateway_.error();
    port_ = gateway_.WaitForPort();
    ASSERT_NE(port_, 0) << gateway_.log();
  }

  // Polled while the gateway is at its limits: no status check (an empty text reads as absent).
  std::string Scrape() {
    TestClient client(admin_port_);
    return client.Request("GET", "/metrics").body;
  }

  // Waits until the /metrics series `series` reaches `value`; false after 30 s.
  bool WaitForMetric(const std::string& series, double value) {
    auto deadline = std::chrono::steady_clock::now() + 30s;
    while (MetricValue(Scrape(), series) < value) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(20ms);
    }
    return true;
  }
};

// A second gateway on a listen address already served exits non-zero with a message naming
// listen.address, and the first keeps serving (SO_REUSEPORT would have split the traffic).
TEST_F(ResourcesTest, SecondInstanceOnTheSameAddressRefusesToStart) {
  StartGateway();
  Set("listen", "address", "\"127.0.0.1:" + std::to_string(port_) + "\"");
  Set("store", "path", "\"" + dir_.Path("data2") + "\"");
  std::string path = dir_.WriteFile("second.toml", ConfigText());
  GatewayProcess second;
  ASSERT_TRUE(second.Start(IDEMGATE_BIN, {"--config", path})) << second.error();
  std::optional<ExitStatus> status = second.Wait();
  ASSERT_TRUE(status.has_value()) << "the second instance is still running:\n" << second.log();
  EXPECT_TRUE(status->exited() && status->code() != 0) << status->ToString();
  EXPECT_NE(
      second.log().find("listen.address 127.0.0.1:" + std::to_string(port_) + " is already in use"),
      std::string::npos)
      << second.log();
  for (int i = 0; i < 8; ++i) {  // every connection still reaches the first instance
    HttpResponse r = Post("k-first-" + std::to_string(i), "{}");
    EXPECT_EQ(r.status, 201) << r.error;
  }
  EXPECT_EQ(upstream_.requests(), 8);
}

// A pause longer than upstream.response_timeout (SIGSTOP, a stalled VM) while the upstream
// answers: on resume the answer is already in the socket, and the timer is due too. The answer
// wins: it is what the client gets and what is stored, not 504 upstream_timeout.
TEST_F(ResourcesTest, AnswerThatArrivedDuringAPauseIsNotATimeout) {
  Set("upstream", "connect_timeout", "\"1s\"");
  Set("upstream", "response_timeout", "\"1s\"");
  Set("idempotency", "lease", "\"5s\"");
  upstream_.SetBehavior(UpstreamBehavior::Respond(201, R"({"id":"pi_paused"})").WithDelay(200));
  StartGateway();
  HttpResponse first;
  std::thread client([&] { first = Post("k-paused", "{}"); });
  ASSERT_TRUE(upstream_.WaitForRequests(1));
  ASSERT_EQ(kill(gateway_.pid(), SIGSTOP), 0);
  // The pause itself is the fault: it must outlast response_timeout (the upstream answers
  // 200 ms into it).
  std::this_thread::sleep_for(1500ms);
  ASSERT_EQ(kill(gateway_.pid(), SIGCONT), 0);
  client.join();
  EXPECT_EQ(first.status, 201) << first.body;
  EXPECT_EQ(first.body, R"({"id":"pi_paused"})");
  HttpResponse retry = Post("k-paused", "{}");
  EXPECT_EQ(retry.status, 201) << retry.body;
  EXPECT_EQ(retry.Header("Idempotent-Replayed"), "true");
  EXPECT_EQ(upstream_.requests(), 1);
}

// At the open-file limit (ulimit -n 100, 150 idle connections) accept() fails with EMFILE
// while connections wait in the backlog: the workers pause accepting instead of spinning, the
// error is logged at most once a second, and once the idle clients leave a request is served.
// Not in the ASan+UBSan build: UBSan's vptr check asks whether the vtable is readable by
// writing it to a pipe(), which fails while the descriptor table is full, so a valid object
// is reported as having an invalid vptr and the gateway halts (a 15-line program reproduces
// it). The same gateway built with ASan but without the vptr check passed 40 of 40 runs.
TEST_F(ResourcesTest, OpenFileLimitNeitherSpinsNorFloodsTheLog) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "UBSan's vptr check cannot run at a full descriptor table (it needs a pipe)";
#endif
  StartWithFileLimit(100);
  ASSERT_EQ(Post("k-before", "{}").status, 201);
  double cpu_before = CpuSeconds(gateway_.pid());
  std::vector<UniqueFd> idle;
  for (int i = 0; i < 150; ++i) {
    idle.push_back(ConnectLoopback(port_));
    ASSERT_TRUE(idle.back().valid()) << i;
  }
  // Measured over a fixed window: what a spinning loop would burn in it (two workers: ~4 s).
  std::this_thread::sleep_for(2s);
  double cpu = CpuSeconds(gateway_.pid()) - cpu_before;
  std::cout << "[ CPU      ] 2 s at the open-file limit: " << cpu << " s of CPU, "
            << gateway_.log().size() << " bytes of output\n";
  EXPECT_LT(cpu, 0.5);
  EXPECT_NE(gateway_.log().find("accept() failed: Too many open files"), std::string::npos)
      << gateway_.log();
  EXPECT_LT(gateway_.log().size(), 8u << 10) << gateway_.log().substr(0, 2000);
  idle.clear();
  HttpResponse after = Post("k-after", "{}");
  EXPECT_EQ(after.status, 201) << after.error;
}

// limits.max_connections = 3 over two workers: the fourth connection is closed at once and
// counted; once one closes, a new client is served again.
TEST_F(ResourcesTest, MaxConnectionsClosesTheNextOneAndCountsIt) {
  Set("limits", "max_connections", "3");
  StartWithAdmin();
  std::vector<std::unique_ptr<TestClient>> open;
  for (int i = 0; i < 3; ++i) {  // each answered, and kept open (keep-alive)
    open.push_back(std::make_unique<TestClient>(port_));
    HttpResponse r = open.back()->Request("POST", "/v1/payment_intents", kMerchant, "{}");
    ASSERT_EQ(r.status, 201) << r.error;
  }
  TestClient fourth(port_);
  EXPECT_TRUE(fourth.IsClosed(5s));
  std::string metrics = Scrape();
  EXPECT_EQ(MetricValue(metrics, "idemgate_connections_refused_total{reason=\"max_connections\"}"),
            1)
      << metrics;
  open.pop_back();
  auto deadline = std::chrono::steady_clock::now() + 5s;
  while (MetricValue(Scrape(), "idemgate_connections_open") != 2 &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(10ms);
  }
  HttpResponse after = Post("k-after", "{}");
  EXPECT_EQ(after.status, 201) << after.error;
}

// RSS bounds mean nothing under ASan/TSan (shadow memory, quarantine).
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SKIP_RSS_BOUND_UNDER_SANITIZERS() GTEST_SKIP() << "RSS bounds need a plain build"
#else
#define SKIP_RSS_BOUND_UNDER_SANITIZERS() (void)0
#endif

// 200 clients ask for the replay of one 8 MB stored response and read nothing. The replays
// share the stored bytes: the answers waiting for them cost one body (unsent_bytes says 8 MB,
// not 1.6 GB), RSS grows by well under the 1.6 GB 200 copies would take (bound: 96 MiB, room
// for the one cached copy, the store's own and allocator slack), and a normal client is served.
TEST_F(ResourcesTest, ReplaysOfOneLargeAnswerShareItsBytes) {
  SKIP_RSS_BOUND_UNDER_SANITIZERS();
  constexpr size_t kBody = 8'000'000;
  constexpr int kClients = 200;
  upstream_.EnqueueBehavior(UpstreamBehavior::BigBody(kBody));
  StartWithAdmin();
  HttpResponse first = Post("k-big", "{}");
  ASSERT_EQ(first.status, 200) << first.error;
  ASSERT_EQ(first.body.size(), kBody);
  int64_t before = ProcStatusBytes(gateway_.pid(), "VmRSS");
  std::string request = TestClient::BuildRequest(
      {"POST",
       "/v1/payment_intents",
       {{"Authorization", "Bearer merchant-demo"}, {"Idempotency-Key", "k-big"}},
       "{}"});
  std::vector<UniqueFd> readers;
  for (int i = 0; i < kClients; ++i) {
    readers.push_back(SendAndNeverRead(port_, request));
    ASSERT_TRUE(readers.back().valid()) << i;
  }
  ASSERT_TRUE(WaitForMetric("idemgate_requests_total{outcome=\"replay\"}", kClients));
  int64_t after = ProcStatusBytes(gateway_.pid(), "VmRSS");
  std::string metrics = Scrape();
  std::cout << "[ RSS      ] before " << before / 1024 << " KiB, with " << kClients
            << " unread 8 MB replays " << after / 1024 << " KiB; unsent_bytes "
            << MetricValue(metrics, "idemgate_unsent_bytes") << "\n";
  EXPECT_LT(after - before, int64_t{96} << 20);
  EXPECT_LE(MetricValue(metrics, "idemgate_unsent_bytes"), kBody);
  EXPECT_EQ(MetricValue(metrics, "idemgate_answers_dropped_total{reason=\"max_unsent_bytes\"}"), 0);
  HttpResponse normal = Post("k-normal", "{}");
  EXPECT_EQ(normal.status, 201) << normal.error;
  EXPECT_EQ(upstream_.requests(), 2);
}

// Distinct large stored answers (guarded POSTs answered with 4 MB each) to 20 clients that read
// nothing, with limits.max_unsent_bytes = 16MiB: the answers past the budget close their
// connections (counted) instead of holding 80 MB, and a normal client is still served.
// (A passthrough answer is relayed, not held: limits_memory_test and stream_http_test.)
TEST_F(ResourcesTest, UnsentBudgetClosesConnectionsPastIt) {
  constexpr size_t kBody = 4 << 20;
  constexpr int kClients = 20;
  Set("limits", "max_unsent_bytes", "\"16MiB\"");
  upstream_.SetBehavior(UpstreamBehavior::BigBody(kBody));
  StartWithAdmin();
  std::vector<UniqueFd> readers;
  for (int i = 0; i < kClients; ++i) {
    std::string post =
        "POST /big HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer merchant-demo\r\n"
        "Idempotency-Key: k-big-" +
        std::to_string(i) + "\r\nContent-Length: 2\r\n\r\n{}";
    readers.push_back(SendAndNeverRead(port_, post));
    ASSERT_TRUE(readers.back().valid()) << i;
  }
  ASSERT_TRUE(WaitForMetric("idemgate_requests_total{outcome=\"fresh\"}", kClients));
  int closed = 0;
  for (UniqueFd& fd : readers) {  // a dropped client sees its connection end, short
    char buf[64 << 10];
    size_t got = 0;
    timeval tv{0, 200'000};
    setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    ssize_t n;
    while ((n = recv(fd.get(), buf, sizeof(buf), 0)) > 0) got += static_cast<size_t>(n);
    if (n == 0 && got < kBody) ++closed;
  }
  // At most four 4 MiB answers fit in 16 MiB at once (fewer are charged when the kernel's
  // socket buffers take a whole answer), so most of the 20 connections were closed.
  EXPECT_GE(closed, kClients / 2);
  ASSERT_TRUE(WaitForMetric("idemgate_answers_dropped_total{reason=\"max_unsent_bytes\"}", closed));
  std::string metrics = Scrape();
  std::cout << "[ UNSENT   ] closed " << closed << " of " << kClients << ", dropped "
            << MetricValue(metrics, "idemgate_answers_dropped_total{reason=\"max_unsent_bytes\"}")
            << "\n";
  EXPECT_EQ(MetricValue(metrics, "idemgate_answers_dropped_total{reason=\"max_unsent_bytes\"}"),
            closed);
  HttpResponse normal = Post("k-normal", "{}");
  EXPECT_EQ(normal.status, 200) << normal.error;
}

// The cached replay of a record goes with the record: after an admin delete the key executes
// again and its new answer is what retries get.
TEST_F(ResourcesTest, AdminDeleteEvictsTheCachedReplay) {
  Set("admin", "token", "\"admin-token\"");
  upstream_.EnqueueBehavior(UpstreamBehavior::Respond(201, "first"));
  upstream_.EnqueueBehavior(UpstreamBehavior::Respond(201, "second"));
  StartWithAdmin();
  ASSERT_EQ(Post("k-del", "{}").body, "first");
  HttpResponse replay = Post("k-del", "{}");
  ASSERT_EQ(replay.body, "first");
  ASSERT_EQ(replay.Header("Idempotent-Replayed"), "true");
  TestClient admin(admin_port_);
  HttpResponse deleted = admin.Request(
      "DELETE", "/records?key=k-del",
      {{"Authorization", "Bearer admin-token"}, {"X-Idemgate-Credential", "Bearer merchant-demo"}});
  ASSERT_EQ(deleted.status, 200) << deleted.raw;
  HttpResponse again = Post("k-del", "{}");
  EXPECT_EQ(again.body, "second");
  EXPECT_EQ(again.Header("Idempotent-Replayed"), std::nullopt);
  EXPECT_EQ(Post("k-del", "{}").body, "second");
  EXPECT_EQ(upstream_.requests(), 2);
}

}  // namespace
}  // namespace idemgate::test
