// SPDX-License-Identifier: Apache-2.0
// SocketReader on real sockets and a real libevent loop: what the peer sends arrives in the
// bufferevent's input in order while the bufferevent still writes; the high watermark stops
// reading until the input is drained below it; Disable stops reading; EOF and a reset come
// through the event callback with reading turned off.
#include "proxy/net/socket_reader.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <functional>
#include <string>
#include <thread>

namespace idemgate {
namespace {

struct SocketReaderTest : ::testing::Test {
  void SetUp() override {
    int fds[2];
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, fds), 0);
    peer = fds[1];
    base.reset(event_base_new());
    bev.reset(bufferevent_socket_new(base.get(), fds[0], BEV_OPT_CLOSE_ON_FREE));
    bufferevent_enable(bev.get(), EV_WRITE);
    reader.Init(bev.get(), &SocketReaderTest::OnRead, &SocketReaderTest::OnEvent, this);
  }
  void TearDown() override {
    reader.Reset();
    bev.reset();
    if (peer >= 0) close(peer);
  }
  static void OnRead(bufferevent*, void* arg) { ++static_cast<SocketReaderTest*>(arg)->reads; }
  static void OnEvent(bufferevent*, short what, void* arg) {
    auto* self = static_cast<SocketReaderTest*>(arg);
    self->events = what;
    self->event_errno = errno;
  }
  // Runs the loop until `done` (or 3 s).
  bool RunUntil(const std::function<bool()>& done) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(3);
    while (!done()) {
      if (std::chrono::steady_clock::now() > end) return false;
      event_base_loop(base.get(), EVLOOP_NONBLOCK);
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return true;
  }
  void RunFor(int ms) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    RunUntil([&] { return std::chrono::steady_clock::now() > end; });
  }
  size_t InputLength() { return evbuffer_get_length(bufferevent_get_input(bev.get())); }
  std::string TakeInput() {
    evbuffer* in = bufferevent_get_input(bev.get());
    std::string out(evbuffer_get_length(in), '\0');
    evbuffer_remove(in, out.data(), out.size());
    return out;
  }
  void PeerSend(const std::string& bytes) {
    ASSERT_EQ(send(peer, bytes.data(), bytes.size(), 0), static_cast<ssize_t>(bytes.size()));
  }

  EventBasePtr base;
  BufferEventPtr bev;
  SocketReader reader;  // after bev: freed first
  int peer = -1;
  int reads = 0;
  short events = 0;
  int event_errno = 0;
};

TEST_F(SocketReaderTest, BytesArriveInTheInputAndTheBufferEventStillWrites) {
  reader.Enable();
  PeerSend("GET / HTTP/1.1\r\n\r\n");
  ASSERT_TRUE(RunUntil([&] { return InputLength() == 18; }));
  EXPECT_GE(reads, 1);
  EXPECT_EQ(TakeInput(), "GET / HTTP/1.1\r\n\r\n");
  bufferevent_write(bev.get(), "HTTP/1.1 200 OK\r\n", 17);
  char buf[64];
  ssize_t n = -1;
  ASSERT_TRUE(RunUntil([&] {
    n = recv(peer, buf, sizeof(buf), MSG_DONTWAIT);
    return n > 0;
  }));
  EXPECT_EQ(std::string(buf, static_cast<size_t>(n)), "HTTP/1.1 200 OK\r\n");
  EXPECT_EQ(events, 0);
}

TEST_F(SocketReaderTest, HighWatermarkStopsReadingUntilDrainedBelowIt) {
  reader.SetHighWater(4096);
  reader.Enable();
  std::string sent;
  for (int i = 0; i < 64 * 1024; ++i) sent.push_back(static_cast<char>('a' + i % 26));
  PeerSend(sent);
  ASSERT_TRUE(RunUntil([&] { return InputLength() >= 4096; }));
  RunFor(50);
  EXPECT_EQ(InputLength(), 4096u);  // no read past the mark while it is held
  std::string got;
  while (got.size() < sent.size()) {
    got += TakeInput();  // the drain below the mark resumes reading
    ASSERT_TRUE(RunUntil([&] { return InputLength() > 0 || got.size() == sent.size(); }));
    EXPECT_LE(InputLength(), 4096u);
  }
  EXPECT_EQ(got, sent);
}

TEST_F(SocketReaderTest, DisableStopsReadingAndEnableResumes) {
  reader.Enable();
  reader.Disable();
  PeerSend("abc");
  RunFor(50);
  EXPECT_EQ(InputLength(), 0u);
  EXPECT_EQ(reads, 0);
  reader.Enable();
  ASSERT_TRUE(RunUntil([&] { return InputLength() == 3; }));
  EXPECT_EQ(TakeInput(), "abc");
}

TEST_F(SocketReaderTest, PeerCloseIsEofWithWhatCameBeforeItRead) {
  reader.Enable();
  PeerSend("last bytes");
  close(peer);
  peer = -1;
  ASSERT_TRUE(RunUntil([&] { return events != 0; }));
  EXPECT_EQ(events, BEV_EVENT_READING | BEV_EVENT_EOF);
  EXPECT_EQ(TakeInput(), "last bytes");
  const int before = reads;
  RunFor(50);  // reading is off: no busy loop on the closed socket
  EXPECT_EQ(reads, before);
}

TEST(SocketReaderTcp, ResetIsAnErrorWithTheSocketsErrno) {
  int listener = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(listen(listener, 1), 0);
  ASSERT_EQ(getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  int client = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
  connect(client, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  int server = accept(listener, nullptr, nullptr);
  ASSERT_GE(server, 0);
  close(listener);

  EventBasePtr base(event_base_new());
  BufferEventPtr bev(bufferevent_socket_new(base.get(), client, BEV_OPT_CLOSE_ON_FREE));
  SocketReader reader;
  struct Seen {
    short what = 0;
    int error = 0;
  } seen;
  reader.Init(
      bev.get(), [](bufferevent*, void*) {},
      [](bufferevent*, short what, void* arg) {
        static_cast<Seen*>(arg)->what = what;
        static_cast<Seen*>(arg)->error = errno;
      },
      &seen);
  reader.Enable();
  linger hard{1, 0};  // close with RST
  setsockopt(server, SOL_SOCKET, SO_LINGER, &hard, sizeof(hard));
  close(server);
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  while (seen.what == 0 && std::chrono::steady_clock::now() < end) {
    event_base_loop(base.get(), EVLOOP_NONBLOCK);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(seen.what, BEV_EVENT_READING | BEV_EVENT_ERROR);
  EXPECT_EQ(seen.error, ECONNRESET);
  reader.Reset();
}

}  // namespace
}  // namespace idemgate
