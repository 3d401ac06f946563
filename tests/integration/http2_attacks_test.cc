// SPDX-License-Identifier: Apache-2.0
// HTTP/2 attacks against the real binary (SPEC §14 H5): rapid reset, a CONTINUATION flood, a
// PING flood and a client that never reads. Each connection ends (the floods with GOAWAY
// ENHANCE_YOUR_CALM, read by the client), the gateway's resident
// memory grows by less than a generous bound, and a normal request on a second connection is
// still answered. The CPU each flood cost is printed
// ("cpu_ms=") for docs/http2.md, never asserted (the machine is shared).
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>

#include "tests/integration/gateway_fixture.h"
#include "tests/support/h2_frames.h"
#include "tests/support/loopback.h"
#include "tests/support/tls_tools.h"

namespace idemgate::test {
namespace {

using namespace std::chrono_literals;
using h2test::Frame;

constexpr int64_t kRssBound = 64ll << 20;

// What the gateway sent on a flooded connection until it closed it.
struct FloodEnd {
  bool closed = false;  // the gateway closed the connection (EOF, reset or EPIPE)
  bool goaway = false;
  uint32_t code = 0;
  size_t sent = 0;  // bytes the gateway took before it closed
};

// Sends the preface, then `rounds` batches from `batch` as fast as the socket takes them,
// reading what comes back, then waits for the connection to end.
FloodEnd Flood(uint16_t port, const std::function<std::string(int)>& batch, int rounds) {
  UniqueFd fd = ConnectLoopback(port);
  FloodEnd end;
  if (!fd.valid()) return end;
  timeval tv{5, 0};
  setsockopt(fd.get(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  std::string in;
  char buf[65536];
  auto drain = [&](int timeout_ms) {
    pollfd p{fd.get(), POLLIN, 0};
    while (poll(&p, 1, timeout_ms) > 0) {
      const ssize_t n = recv(fd.get(), buf, sizeof(buf), 0);
      if (n <= 0) return false;
      in.append(buf, static_cast<size_t>(n));
    }
    return true;
  };
  bool open = true;
  std::string out = h2test::Preface();
  for (int i = 0; i < rounds && open; ++i) {
    out += batch(i);
    for (size_t sent = 0; sent < out.size() && open;) {
      const ssize_t n = send(fd.get(), out.data() + sent, out.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) open = false;
      sent += n > 0 ? static_cast<size_t>(n) : 0;
      end.sent += n > 0 ? static_cast<size_t>(n) : 0;
    }
    out.clear();
    if (open) open = drain(0);
  }
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (open && std::chrono::steady_clock::now() < deadline) open = drain(100);
  end.closed = !open;
  for (const h2test::SeenFrame& f : h2test::ParseFrames(in)) {
    if (f.type != NGHTTP2_GOAWAY) continue;
    end.goaway = true;
    end.code = f.code;
  }
  return end;
}

class Http2AttacksTest : public GatewayTest {
 protected:
  void SetUp() override {
    GatewayTest::SetUp();
    StartGateway();
    ASSERT_EQ(Post("warm-up", "{}").status, 201);  // the gateway's steady state, then measure
    rss_before_ = ProcStatusBytes(gateway_.pid(), "VmRSS");
    cpu_before_ = CpuMs(gateway_.pid());
  }
  // After the flood: memory within the bound, the CPU it cost printed, and a normal request on
  // a new connection (over HTTP/2) still answered.
  void ExpectStillServing(const char* what, const FloodEnd& end) {
    const int64_t grew = ProcStatusBytes(gateway_.pid(), "VmRSS") - rss_before_;
    printf("%s: sent_kib=%zu cpu_ms=%lld rss_grew_kib=%lld\n", what, end.sent / 1024,
           static_cast<long long>(CpuMs(gateway_.pid()) - cpu_before_),
           static_cast<long long>(grew / 1024));
    EXPECT_LT(grew, kRssBound);
    CurlResult r = RunCurl(
        dir_, {"--http2-prior-knowledge", "-X", "POST", "-H", "Authorization: Bearer merchant-demo",
               "-H", "Idempotency-Key: after-flood", "--data-binary", "{}",
               "http://127.0.0.1:" + std::to_string(port_) + "/v1/payment_intents"});
    EXPECT_EQ(r.status, 201) << r.output;
  }
  int64_t rss_before_ = 0;
  int64_t cpu_before_ = 0;
};

std::string Rst(int32_t id) {
  std::string code(4, '\0');
  code[3] = NGHTTP2_CANCEL;
  return Frame(NGHTTP2_RST_STREAM, 0, id, code);
}

// Rapid reset (CVE-2023-44487): streams opened and reset at once, far past the burst.
TEST_F(Http2AttacksTest, RapidResetEndsWithGoaway) {
  h2test::Encoder encoder;
  int32_t next = 1;
  FloodEnd end = Flood(
      port_,
      [&](int) {
        std::string bytes;
        for (int i = 0; i < 100; ++i, next += 2) {
          bytes += Frame(NGHTTP2_HEADERS, NGHTTP2_FLAG_END_HEADERS, next,
                         encoder.Block(h2test::PostHead("/v1/payment_intents"))) +
                   Rst(next);
        }
        return bytes;
      },
      200);
  EXPECT_TRUE(end.closed);
  EXPECT_TRUE(end.goaway);
  EXPECT_EQ(end.code, uint32_t{NGHTTP2_ENHANCE_YOUR_CALM});
  ExpectStillServing("rapid reset", end);
}

// One HEADERS frame without END_HEADERS, then CONTINUATION frames without end.
TEST_F(Http2AttacksTest, ContinuationFloodEndsWithGoaway) {
  h2test::Encoder encoder;
  const std::string block = encoder.Block(h2test::PostHead("/v1/payment_intents"));
  FloodEnd end = Flood(
      port_,
      [&](int round) {
        std::string bytes;
        if (round == 0) bytes = Frame(NGHTTP2_HEADERS, 0, 1, block.substr(0, 1));
        for (int i = 0; i < 100; ++i) bytes += Frame(NGHTTP2_CONTINUATION, 0, 1, "x");
        return bytes;
      },
      1000);
  EXPECT_TRUE(end.closed);
  EXPECT_TRUE(end.goaway);
  EXPECT_EQ(end.code, uint32_t{NGHTTP2_ENHANCE_YOUR_CALM});
  ExpectStillServing("CONTINUATION flood", end);
}

// PINGs far past the control-frame budget, the client reading the acknowledgements.
TEST_F(Http2AttacksTest, PingFloodEndsWithGoaway) {
  const std::string ping = Frame(NGHTTP2_PING, 0, 0, std::string(8, 'p'));
  FloodEnd end = Flood(
      port_,
      [&](int) {
        std::string bytes;
        for (int i = 0; i < 500; ++i) bytes += ping;
        return bytes;
      },
      100);
  EXPECT_TRUE(end.closed);
  EXPECT_TRUE(end.goaway);
  EXPECT_EQ(end.code, uint32_t{NGHTTP2_ENHANCE_YOUR_CALM});
  ExpectStillServing("PING flood", end);
}

// SETTINGS_INITIAL_WINDOW_SIZE and the connection's WINDOW_UPDATE, both to 2^31 - 1: flow
// control then bounds nothing, and whatever bounds the gateway's memory is its own.
std::string WideOpenWindows() {
  std::string setting = {0x00, NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, 0x7f, '\xff', '\xff', '\xff'};
  const uint32_t more = 0x7fffffff - 65535;
  std::string update = {static_cast<char>(more >> 24), static_cast<char>(more >> 16),
                        static_cast<char>(more >> 8), static_cast<char>(more)};
  return Frame(NGHTTP2_SETTINGS, 0, 0, setting) + Frame(NGHTTP2_WINDOW_UPDATE, 0, 0, update);
}

// The state (the st field of /proc/net/tcp: 1 = established) of the gateway's end of the
// loopback connection whose client end is `client_port`; -1 once it is gone.
int GatewaySideState(uint16_t gateway_port, uint16_t client_port) {
  char local[32], remote[32];
  snprintf(local, sizeof(local), "0100007F:%04X", gateway_port);
  snprintf(remote, sizeof(remote), "0100007F:%04X", client_port);
  std::ifstream in("/proc/net/tcp");
  std::string line;
  std::getline(in, line);  // the header
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string slot, l, r, state;
    fields >> slot >> l >> r >> state;
    if (l == local && r == remote) return std::stoi(state, nullptr, 16);
  }
  return -1;
}

// A client that never reads: 8 streams asking for 8 MiB answers, its windows wide open, and
// nothing taken from its socket. The gateway stops pulling frames
// once its output buffer is full and the relays stop reading their upstream, so memory stays
// bounded; after limits.idle_timeout with no byte written the gateway ends the connection (a
// GOAWAY could not reach it), which the kernel's table shows before the client reads. The CPU
// of the wait is printed: a stall costs nothing while it lasts.
TEST_F(Http2AttacksTest, ClientThatNeverReadsIsCutOff) {
  constexpr size_t kBody = 8 << 20;
  constexpr int kStreams = 8;
  Set("limits", "idle_timeout", "\"1s\"");
  upstream_.SetBehavior(UpstreamBehavior::BigBody(kBody));
  RestartGateway();
  rss_before_ = ProcStatusBytes(gateway_.pid(), "VmRSS");
  cpu_before_ = CpuMs(gateway_.pid());
  UniqueFd fd = ConnectLoopback(port_);
  ASSERT_TRUE(fd.valid());
  h2test::Encoder encoder;
  std::string out = h2test::Preface() + WideOpenWindows();
  for (int i = 0; i < kStreams; ++i) {
    out += Frame(NGHTTP2_HEADERS, NGHTTP2_FLAG_END_HEADERS | NGHTTP2_FLAG_END_STREAM, 1 + 2 * i,
                 encoder.Block({{":method", "GET"},
                                {":scheme", "http"},
                                {":authority", "api.test"},
                                {":path", "/big/" + std::to_string(i)}}));
  }
  ASSERT_EQ(send(fd.get(), out.data(), out.size(), MSG_NOSIGNAL), static_cast<ssize_t>(out.size()));
  sockaddr_in me{};
  socklen_t len = sizeof(me);
  ASSERT_EQ(getsockname(fd.get(), reinterpret_cast<sockaddr*>(&me), &len), 0);
  // The gateway ends its side (FIN_WAIT1 behind the queued bytes) while the client still has
  // not read a byte: once the socket buffers are full, plus idle_timeout.
  const auto cut_by = std::chrono::steady_clock::now() + 30s;
  while (GatewaySideState(port_, ntohs(me.sin_port)) == 1 &&
         std::chrono::steady_clock::now() < cut_by) {
    std::this_thread::sleep_for(100ms);
  }
  EXPECT_NE(GatewaySideState(port_, ntohs(me.sin_port)), 1) << "still established after 30s";
  const int64_t grew = ProcStatusBytes(gateway_.pid(), "VmRSS") - rss_before_;
  // Only now read: what the two kernels hold, then the end, well short of the answers. Had the
  // connection not been ended, the relays would resume and the answers keep coming.
  size_t got = 0;
  bool ended = false;
  char buf[65536];
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  pollfd p{fd.get(), POLLIN, 0};
  while (!ended && std::chrono::steady_clock::now() < deadline && poll(&p, 1, 2000) > 0) {
    const ssize_t n = recv(fd.get(), buf, sizeof(buf), 0);
    if (n > 0) got += static_cast<size_t>(n);
    ended = n <= 0;
  }
  FloodEnd end;
  end.sent = out.size();
  printf("client that never reads: received_kib=%zu of %zu, rss_grew_kib=%lld\n", got / 1024,
         kStreams * kBody / 1024, static_cast<long long>(grew / 1024));
  EXPECT_TRUE(ended);
  EXPECT_LT(got, kBody);  // not even one whole answer
  EXPECT_LT(grew, int64_t{kStreams} * int64_t{kBody} / 2);
  upstream_.SetBehavior(UpstreamBehavior::Respond(201, R"({"id":"pi_1"})"));
  ExpectStillServing("client that never reads", end);
}

}  // namespace
}  // namespace idemgate::test
