// SPDX-License-Identifier: Apache-2.0
// Through the real binary: the upstream cannot be connected to (refused, connect timeout
// against a full accept queue): 502 upstream_unavailable, the claim released (R3, R3a); and a
// pooled connection the upstream closed while idle is replaced transparently.
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <atomic>
#include <regex>

#include "tests/integration/gateway_fixture.h"
#include "tests/support/loopback.h"

namespace idemgate::test {
namespace {

using namespace std::chrono_literals;

// A blocking origin on 127.0.0.1 whose socket is bound at construction but listens only when
// told, so the same port first refuses and later answers. Each connection gets a thread that
// answers every request with 201 "ok" (keep-alive) and, when close_after_answer, then closes.
class ScriptedOrigin {
 public:
  ScriptedOrigin() { fd_ = BindLoopback(&port_); }
  ~ScriptedOrigin() {
    stop_ = true;
    shutdown(fd_.get(), SHUT_RDWR);
    if (acceptor_.joinable()) acceptor_.join();
    for (std::thread& t : conns_) t.join();
  }
  uint16_t port() const { return port_; }
  bool Listen(int backlog) { return listen(fd_.get(), backlog) == 0; }
  void StartAccepting() {
    acceptor_ = std::thread([this] { AcceptLoop(); });
  }
  int requests() const { return requests_; }
  int connections() const { return connections_; }
  int closed() const { return closed_; }
  std::atomic<bool> close_after_answer{false};

 private:
  void AcceptLoop() {
    while (!stop_) {
      pollfd p{fd_.get(), POLLIN, 0};
      if (poll(&p, 1, 50) <= 0) continue;
      int c = accept4(fd_.get(), nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) continue;
      ++connections_;
      conns_.emplace_back([this, c] { Serve(c); });
    }
  }
  void Serve(int c) {
    std::string in;
    char buf[4096];
    while (!stop_) {
      size_t head = in.find("\r\n\r\n");
      if (head != std::string::npos) {
        std::smatch m;
        std::string h = in.substr(0, head);
        static const std::regex kLen("Content-Length: *([0-9]+)", std::regex::icase);
        size_t body = std::regex_search(h, m, kLen) ? std::stoul(m[1].str()) : 0;
        if (in.size() >= head + 4 + body) {
          in.erase(0, head + 4 + body);
          ++requests_;
          static const char kAnswer[] = "HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok";
          send(c, kAnswer, sizeof(kAnswer) - 1, MSG_NOSIGNAL);
          if (close_after_answer) break;
          continue;
        }
      }
      pollfd p{c, POLLIN, 0};
      if (poll(&p, 1, 50) <= 0) continue;
      ssize_t n = recv(c, buf, sizeof(buf), 0);
      if (n <= 0) break;
      in.append(buf, static_cast<size_t>(n));
    }
    close(c);
    ++closed_;
  }

  UniqueFd fd_;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> requests_{0}, connections_{0}, closed_{0};
  std::thread acceptor_;
  std::vector<std::thread> conns_;  // acceptor thread only, joined after it
};

class FaultsConnectTest : public GatewayTest {
 protected:
  void SetUp() override {
    GatewayTest::SetUp();
    Set("server", "workers", "1");
    Set("upstream", "url", "\"http://127.0.0.1:" + std::to_string(origin_.port()) + "\"");
    Set("upstream", "connect_timeout", "\"300ms\"");
    Set("upstream", "response_timeout", "\"1s\"");
    Set("idempotency", "lease", "\"5s\"");
  }

  // 502 upstream_unavailable, and the key left free (no 409, no replay).
  void ExpectUnavailable(const std::string& key) {
    HttpResponse r = Post(key, R"({"amount":"3"})");
    ASSERT_EQ(r.status, 502) << r.raw;
    EXPECT_EQ(ErrorCodeOf(r), "upstream_unavailable") << r.body;
    EXPECT_FALSE(r.Header("Idempotent-Replayed").has_value());
  }

  // With the origin back, the same key executes (nothing was stored) and is then stored.
  void ExpectKeyExecutesNow(const std::string& key) {
    HttpResponse r = Post(key, R"({"amount":"3"})");
    ASSERT_EQ(r.status, 201) << r.raw;
    EXPECT_FALSE(r.Header("Idempotent-Replayed").has_value());
    EXPECT_EQ(origin_.requests(), 1);
    HttpResponse replay = Post(key, R"({"amount":"3"})");
    EXPECT_EQ(replay.Header("Idempotent-Replayed"), "true");
    EXPECT_EQ(origin_.requests(), 1);
  }

  ScriptedOrigin origin_;
};

TEST_F(FaultsConnectTest, RefusedReleasesTheClaim) {
  StartGateway();  // the origin's port is bound but not listening: connect is refused
  ExpectUnavailable("k-refused");
  ExpectUnavailable("k-refused");  // released: not 409 in_use, not a stored replay
  HttpResponse pass = Post("", "{}");
  EXPECT_EQ(pass.status, 502);
  EXPECT_EQ(ErrorCodeOf(pass), "upstream_unavailable");
  ASSERT_TRUE(origin_.Listen(16));
  origin_.StartAccepting();
  ExpectKeyExecutesNow("k-refused");
}

// A listening socket whose accept queue is full drops further SYNs, so the gateway's connect
// neither succeeds nor fails: only upstream.connect_timeout ends it. Honest on loopback.
TEST_F(FaultsConnectTest, ConnectTimeoutAgainstFullBacklogReleasesTheClaim) {
  ASSERT_TRUE(origin_.Listen(0));
  std::vector<UniqueFd> fillers;
  bool full = false;
  for (int i = 0; i < 8 && !full; ++i) {
    UniqueFd fd = ConnectLoopback(origin_.port(), SOCK_NONBLOCK);
    ASSERT_TRUE(fd.valid());
    pollfd p{fd.get(), POLLOUT, 0};
    full = poll(&p, 1, 300) == 0;  // this one's SYN was dropped: the queue is full
    fillers.push_back(std::move(fd));
  }
  if (!full) GTEST_SKIP() << "could not fill the accept queue on loopback";
  StartGateway();
  auto start = std::chrono::steady_clock::now();
  ExpectUnavailable("k-connect-timeout");
  EXPECT_GE(std::chrono::steady_clock::now() - start, 250ms);  // it waited for the timeout
  EXPECT_EQ(origin_.requests(), 0);
  fillers.clear();
  origin_.StartAccepting();
  // The queued filler is accepted first; until then the queue is still full and a new SYN
  // would be dropped again.
  auto deadline = std::chrono::steady_clock::now() + 5s;
  while (origin_.connections() < 1 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(10ms);
  }
  ASSERT_GE(origin_.connections(), 1);
  ExpectKeyExecutesNow("k-connect-timeout");
}

TEST_F(FaultsConnectTest, IdleConnectionClosedByUpstreamIsReplaced) {
  ASSERT_TRUE(origin_.Listen(16));
  origin_.StartAccepting();
  origin_.close_after_answer = true;  // answers keep-alive, then closes while idle
  StartGateway();
  for (int i = 1; i <= 3; ++i) {
    // The previous answer's connection is closed by the origin before this request.
    auto deadline = std::chrono::steady_clock::now() + 5s;
    while (origin_.closed() < i - 1 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(10ms);
    }
    ASSERT_EQ(origin_.closed(), i - 1);
    HttpResponse r = Post("k-idle-" + std::to_string(i), "{}");
    EXPECT_EQ(r.status, 201) << r.raw;
  }
  EXPECT_EQ(origin_.requests(), 3);
  EXPECT_EQ(origin_.connections(), 3);
}

}  // namespace
}  // namespace idemgate::test
