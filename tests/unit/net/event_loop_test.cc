// SPDX-License-Identifier: Apache-2.0
// RunEventLoop on a real libevent loop and a real socket pair: with and without busy polling,
// every byte written is read, timers fire, and the loop returns on event_base_loopexit. With
// busy polling the loop thread keeps its CPU after an event (it polls instead of sleeping), and
// gives it up once the window has passed with no event. CPU time, not wall time, is asserted,
// with wide margins: a spinning thread gets well over 10% of a CPU even on a loaded machine, and
// a sleeping one next to none.
#include <gtest/gtest.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <ctime>
#include <thread>

#include "proxy/net/event_loop.h"
#include "proxy/net/event_util.h"

namespace idemgate {
namespace {

using std::chrono::milliseconds;

struct Reader {
  event_base* base = nullptr;
  std::atomic<int> bytes{0};
  std::atomic<int> exit_after{-1};  // loopexit once this many bytes were read
  static void OnRead(evutil_socket_t fd, short, void* arg) {
    auto* self = static_cast<Reader*>(arg);
    char buf[64];
    ssize_t n = read(fd, buf, sizeof(buf));
    if (n > 0) self->bytes += static_cast<int>(n);
    if (self->exit_after >= 0 && self->bytes >= self->exit_after) {
      event_base_loopexit(self->base, nullptr);
    }
  }
};

class EventLoopTest : public ::testing::TestWithParam<int64_t> {
 protected:
  void SetUp() override {
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, fds_), 0);
    evutil_make_socket_nonblocking(fds_[0]);
    base_.reset(event_base_new());
    reader_.base = base_.get();
    ev_.reset(event_new(base_.get(), fds_[0], EV_READ | EV_PERSIST, &Reader::OnRead, &reader_));
    event_add(ev_.get(), nullptr);
  }
  void TearDown() override {
    ev_.reset();
    base_.reset();
    close(fds_[0]);
    close(fds_[1]);
  }
  void Send(int n) {
    for (int i = 0; i < n; ++i) ASSERT_EQ(write(fds_[1], "x", 1), 1);
  }
  // CPU time of thread `t` (its pthread clock).
  static milliseconds ThreadCpu(pthread_t t) {
    clockid_t id;
    timespec ts{};
    if (pthread_getcpuclockid(t, &id) != 0 || clock_gettime(id, &ts) != 0) return milliseconds(-1);
    return milliseconds(ts.tv_sec * 1000 + ts.tv_nsec / 1'000'000);
  }
  // Runs the loop with `busy_poll_us` on a thread, wakes it with one byte, and returns the CPU
  // the thread spends over `span`, starting `after` past that byte; then stops the loop.
  milliseconds CpuAfterOneEvent(int64_t busy_poll_us, milliseconds after, milliseconds span) {
    std::thread loop([&] { RunEventLoop(base_.get(), busy_poll_us); });
    Send(1);
    std::this_thread::sleep_for(after);
    const milliseconds before = ThreadCpu(loop.native_handle());
    std::this_thread::sleep_for(span);
    const milliseconds cpu = ThreadCpu(loop.native_handle()) - before;
    reader_.exit_after = 0;
    Send(1);
    loop.join();
    return cpu;
  }

  int fds_[2] = {-1, -1};
  EventBasePtr base_;
  EventPtr ev_;
  Reader reader_;
};

TEST_P(EventLoopTest, ReadsEveryByteAndReturnsOnLoopExit) {
  reader_.exit_after = 50;
  std::thread loop([&] { RunEventLoop(base_.get(), GetParam()); });
  for (int i = 0; i < 50; ++i) {
    Send(1);
    std::this_thread::sleep_for(std::chrono::microseconds(i % 2 == 0 ? 50 : 3000));
  }
  loop.join();  // returns: the 50th byte called loopexit
  EXPECT_EQ(reader_.bytes.load(), 50);
}

TEST_P(EventLoopTest, TimersFireWhileItPolls) {
  int fired = 0;
  Timer timer;
  struct Fire {
    int* fired;
    event_base* base;
    void Run() {
      ++*fired;
      event_base_loopexit(base, nullptr);
    }
  } fire{&fired, base_.get()};
  timer.Init<Fire, &Fire::Run>(base_.get(), &fire);
  const auto start = std::chrono::steady_clock::now();
  timer.Arm(30);
  std::thread loop([&] { RunEventLoop(base_.get(), GetParam()); });
  Send(1);  // polling starts now; with the 2 s window it lasts far past the timer's deadline
  loop.join();
  EXPECT_EQ(fired, 1);
  // A loop that ran no timer while polling would run it only once the window closed, 2 s on.
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(1'000));
}

INSTANTIATE_TEST_SUITE_P(BusyPoll, EventLoopTest, ::testing::Values(0, 200, 2'000'000));

using EventLoopCpuTest = EventLoopTest;

TEST_F(EventLoopCpuTest, KeepsItsCpuForTheWindowAfterAnEvent) {
  EXPECT_GT(CpuAfterOneEvent(1'000'000, milliseconds(20), milliseconds(300)), milliseconds(30))
      << "the loop slept instead of polling";
}

TEST_F(EventLoopCpuTest, SleepsOnceTheWindowPassesWithNoEvent) {
  EXPECT_LT(CpuAfterOneEvent(1'000, milliseconds(100), milliseconds(300)), milliseconds(30))
      << "the loop kept polling past its window";
}

TEST_F(EventLoopCpuTest, WithoutBusyPollingItSleeps) {
  EXPECT_LT(CpuAfterOneEvent(0, milliseconds(20), milliseconds(300)), milliseconds(30));
}

}  // namespace
}  // namespace idemgate
