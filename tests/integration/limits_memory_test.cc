// SPDX-License-Identifier: Apache-2.0
// Through the real binary: back-pressure keeps the gateway's memory bounded (a client that
// pipelines without reading, a client that reads a large answer slowly), and the cost of
// 1,000 idle connections, measured as the gateway's VmRSS and reported.
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <fstream>
#include <iostream>

#include "tests/integration/gateway_fixture.h"
#include "tests/support/loopback.h"

// RSS bounds mean nothing under ASan/TSan (shadow memory, quarantine): those tests skip there.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SKIP_RSS_BOUND_UNDER_SANITIZERS() \
  GTEST_SKIP() << "RSS bounds are not meaningful under sanitizers"
#else
#define SKIP_RSS_BOUND_UNDER_SANITIZERS() (void)0
#endif

namespace idemgate::test {
namespace {

using namespace std::chrono_literals;
constexpr int64_t kMiB = 1 << 20;

// How many file descriptors `pid` has open.
// The process's open sockets (RocksDB opens and closes files on its own schedule, so only
// sockets say which connections are open).
int OpenSockets(pid_t pid) {
  std::string dir_path = "/proc/" + std::to_string(pid) + "/fd";
  DIR* dir = opendir(dir_path.c_str());
  if (dir == nullptr) return -1;
  int n = 0;
  char target[64];
  while (dirent* entry = readdir(dir)) {
    std::string link = dir_path + "/" + entry->d_name;
    ssize_t len = readlink(link.c_str(), target, sizeof(target) - 1);
    if (len > 0 && std::string_view(target, len).substr(0, 7) == "socket:") ++n;
  }
  closedir(dir);
  return n;
}

UniqueFd ConnectRaw(uint16_t port, bool nonblocking, bool small_window = true) {
  UniqueFd fd = ConnectLoopback(port);
  if (!fd.valid()) return fd;
  int small = 16 << 10;  // small receive window: the gateway's writes back up quickly
  if (small_window) setsockopt(fd.get(), SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
  if (nonblocking) fcntl(fd.get(), F_SETFL, fcntl(fd.get(), F_GETFL) | O_NONBLOCK);
  return fd;
}

class LimitsMemoryTest : public GatewayTest {
 protected:
  void SetUp() override {
    GatewayTest::SetUp();
    Set("limits", "max_response_body", "\"32MiB\"");
  }
  void Report(const std::string& what, int64_t bytes) {
    std::cout << "[ RSS      ] " << what << ": " << bytes / 1024 << " KiB\n";
    RecordProperty(what, std::to_string(bytes / 1024) + " KiB");
  }
};

// Pipelined passthrough GETs with 256 KiB answers, never read: the gateway must stop reading
// instead of buffering the requests or their answers.
TEST_F(LimitsMemoryTest, PipeliningWithoutReadingIsBounded) {
  SKIP_RSS_BOUND_UNDER_SANITIZERS();
  upstream_.SetBehavior(UpstreamBehavior::BigBody(256 << 10));
  StartGateway();
  const std::string request = "GET /v1/things HTTP/1.1\r\nHost: x\r\n\r\n";
  std::string burst;
  for (int i = 0; i < 1000; ++i) burst += request;
  std::vector<UniqueFd> clients;
  int64_t sent = 0;
  for (int c = 0; c < 4; ++c) {
    clients.push_back(ConnectRaw(port_, true));
    ASSERT_TRUE(clients.back().valid());
    auto quiet_since = std::chrono::steady_clock::now();
    while (sent < (int64_t{256} << 20) && std::chrono::steady_clock::now() - quiet_since < 1s) {
      ssize_t n = send(clients.back().get(), burst.data(), burst.size(), MSG_NOSIGNAL);
      if (n > 0) {
        sent += n;
        quiet_since = std::chrono::steady_clock::now();
      } else {
        pollfd p{clients.back().get(), POLLOUT, 0};
        poll(&p, 1, 50);
      }
    }
  }
  int64_t rss = ProcStatusBytes(gateway_.pid(), "VmRSS");
  Report("pipelining 4 clients, unread", rss);
  std::cout << "[ RSS      ] bytes of requests the gateway accepted: " << sent << "\n";
  EXPECT_LT(rss, 200 * kMiB);
  EXPECT_LT(upstream_.requests(), 4000);  // it stopped: not every request was executed
}

// One large answer read slowly by several clients: memory stays near the answers' size.
TEST_F(LimitsMemoryTest, SlowReadersOfLargeAnswersAreBounded) {
  SKIP_RSS_BOUND_UNDER_SANITIZERS();
  constexpr size_t kBody = 16 << 20;
  upstream_.SetBehavior(UpstreamBehavior::BigBody(kBody));
  StartGateway();
  std::vector<UniqueFd> readers;
  for (int c = 0; c < 4; ++c) {
    readers.push_back(ConnectRaw(port_, false, false));
    std::string get = "GET /big/" + std::to_string(c) + " HTTP/1.1\r\nHost: x\r\n\r\n";
    ASSERT_EQ(send(readers.back().get(), get.data(), get.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(get.size()));
  }
  ASSERT_TRUE(upstream_.WaitForRequests(4, 10s));
  int64_t peak = 0;
  std::vector<size_t> got(readers.size(), 0);
  std::vector<char> buf(64 << 10);
  auto deadline = std::chrono::steady_clock::now() + 60s;
  bool done = false;
  while (!done && std::chrono::steady_clock::now() < deadline) {
    done = true;
    for (size_t c = 0; c < readers.size(); ++c) {
      if (got[c] >= kBody) continue;
      done = false;
      ssize_t n = recv(readers[c].get(), buf.data(), buf.size(), 0);  // <= 64 KiB a turn
      if (n <= 0) FAIL() << "reader " << c << " lost its connection";
      got[c] += static_cast<size_t>(n);
    }
    peak = std::max(peak, ProcStatusBytes(gateway_.pid(), "VmRSS"));
    std::this_thread::sleep_for(1ms);  // a slow reader: ~64 MiB/s at most across all four
  }
  Report("4 slow readers of 16 MiB answers, peak", peak);
  EXPECT_TRUE(done);
  EXPECT_LT(peak, 200 * kMiB);
}

// A client that stops reading a large answer is disconnected after limits.idle_timeout without
// progress, instead of holding its buffered answer (and a descriptor) forever.
TEST_F(LimitsMemoryTest, ClientThatStopsReadingIsDisconnected) {
  constexpr size_t kBody = 16 << 20;
  Set("server", "workers", "1");
  Set("limits", "idle_timeout", "\"500ms\"");
  upstream_.SetBehavior(UpstreamBehavior::BigBody(kBody));
  StartGateway();
  int base = OpenSockets(gateway_.pid());
  UniqueFd stalled = ConnectRaw(port_, false, false);
  const std::string get = "GET /big HTTP/1.1\r\nHost: x\r\n\r\n";
  ASSERT_EQ(send(stalled.get(), get.data(), get.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(get.size()));
  ASSERT_TRUE(upstream_.WaitForRequests(1));
  // The stalled client's connection must go, and with it the upstream connection its answer
  // was being relayed on (a passthrough answer streams: it is never buffered whole).
  auto deadline = std::chrono::steady_clock::now() + 10s;
  int fds = OpenSockets(gateway_.pid());
  while (fds != base && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(20ms);
    fds = OpenSockets(gateway_.pid());
  }
  EXPECT_EQ(fds, base) << "the stalled client's connection is still open";
  // What it reads now ends before the whole answer: the gateway gave up on it.
  size_t got = 0;
  std::vector<char> buf(64 << 10);
  timeval tv{5, 0};
  setsockopt(stalled.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  for (ssize_t n; (n = recv(stalled.get(), buf.data(), buf.size(), 0)) > 0;) got += n;
  EXPECT_LT(got, kBody);
}

TEST_F(LimitsMemoryTest, ThousandIdleConnections) {
  StartGateway();
  ASSERT_EQ(Post("k-warm", "{}").status, 201);
  int64_t before = ProcStatusBytes(gateway_.pid(), "VmRSS");
  std::vector<UniqueFd> idle;
  for (int i = 0; i < 1000; ++i) {
    idle.push_back(ConnectRaw(port_, false));
    ASSERT_TRUE(idle.back().valid()) << i;
  }
  // Every connection was accepted: a request on a fresh one still works, and the 1,000 are open.
  ASSERT_EQ(Post("k-after-idle", "{}").status, 201);
  std::this_thread::sleep_for(200ms);  // let the accept loop catch up before measuring
  int64_t after = ProcStatusBytes(gateway_.pid(), "VmRSS");
  Report("RSS before 1000 idle connections", before);
  Report("RSS with 1000 idle connections", after);
  std::cout << "[ RSS      ] per idle connection: " << (after - before) / 1000 << " bytes\n";
  for (UniqueFd& fd : idle) {
    pollfd p{fd.get(), POLLIN, 0};
    EXPECT_EQ(poll(&p, 1, 0), 0);  // none was closed or answered
  }
}

}  // namespace
}  // namespace idemgate::test
