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

UniqueFd ConnectTo(uint16_t port) {
  UniqueFd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(port);
  if (connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) return UniqueFd();
  return fd;
}

// The value of one /metrics series ("name{labels}" exactly as rendered); -1 when absent.
double MetricValue(const std::string& text, const std::string& series) {
  std::string needle = "\n" + series + " ";
  size_t at = ("\n" + text).find(needle);
  if (at == std::string::npos) return -1;
  return std::strtod(text.c_str() + at + needle.size() - 1, nullptr);
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

  void StartWithAdmin() {
    Set("admin", "address", "\"127.0.0.1:0\"");
    StartGateway();
    admin_port_ = gateway_.WaitForPort("admin listening on ");
    ASSERT_NE(admin_port_, 0) << gateway_.log();
  }

  std::string Scrape() {
    TestClient client(admin_port_);
    return client.Request("GET", "/metrics").body;
  }

  uint16_t admin_port_ = 0;
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
  EXPECT_NE(second.log().find("listen.address 127.0.0.1:" + std::to_string(port_) +
                              " is already in use"),
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
TEST_F(ResourcesTest, OpenFileLimitNeitherSpinsNorFloodsTheLog) {
  StartWithFileLimit(100);
  ASSERT_EQ(Post("k-before", "{}").status, 201);
  double cpu_before = CpuSeconds(gateway_.pid());
  std::vector<UniqueFd> idle;
  for (int i = 0; i < 150; ++i) {
    idle.push_back(ConnectTo(port_));
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

}  // namespace
}  // namespace idemgate::test
