// SPDX-License-Identifier: Apache-2.0
// One-time process setup for the test-support library's libevent loops.
#include "tests/support/ev_util.h"

#include <event2/thread.h>

#include <csignal>
#include <mutex>

namespace idemgate::test {

void InitLibeventOnce() {
  static std::once_flag once;
  std::call_once(once, [] {
    evthread_use_pthreads();
    std::signal(SIGPIPE, SIG_IGN);
  });
}

bool LoopThread::Start(event_base* base) {
  if (thread_.joinable()) return false;
  base_ = base;
  stop_.reset(event_new(base, -1, 0, &LoopThread::OnStop, base));
  if (!stop_) return false;
  thread_ = std::thread([base] { event_base_loop(base, EVLOOP_NO_EXIT_ON_EMPTY); });
  return true;
}

void LoopThread::Stop() {
  if (!thread_.joinable()) return;
  event_active(stop_.get(), EV_READ, 0);
  thread_.join();
  stop_.reset();
}

void LoopThread::OnStop(evutil_socket_t, short, void* arg) {
  event_base_loopbreak(static_cast<event_base*>(arg));
}

}  // namespace idemgate::test
