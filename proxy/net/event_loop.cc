// SPDX-License-Identifier: Apache-2.0
#include "proxy/net/event_loop.h"

#include <chrono>

namespace idemgate {
namespace {

bool Stopped(event_base* base) {
  return event_base_got_exit(base) != 0 || event_base_got_break(base) != 0;
}

// Whether any event became active since the last call: libevent's high-water mark of active
// events, cleared on each read.
bool HadEvents(event_base* base) {
  return event_base_get_max_events(base, EVENT_BASE_COUNT_ACTIVE, /*clear=*/1) > 0;
}

}  // namespace

void RunEventLoop(event_base* base, int64_t busy_poll_us) {
  if (busy_poll_us <= 0) {
    event_base_loop(base, EVLOOP_NO_EXIT_ON_EMPTY);
    return;
  }
  using Clock = std::chrono::steady_clock;
  const auto window = std::chrono::microseconds(busy_poll_us);
  // Each event_base_loop call starts by clearing the exit and break flags, so they are read
  // after every call, before the next.
  while (!Stopped(base)) {
    event_base_loop(base, EVLOOP_ONCE | EVLOOP_NO_EXIT_ON_EMPTY);  // sleeps until an event
    HadEvents(base);
    Clock::time_point last = Clock::now();
    while (!Stopped(base)) {
      event_base_loop(base, EVLOOP_NONBLOCK | EVLOOP_NO_EXIT_ON_EMPTY);  // epoll_wait(0)
      const Clock::time_point now = Clock::now();
      if (HadEvents(base)) {
        last = now;
      } else if (now - last >= window) {
        break;
      }
    }
  }
}

}  // namespace idemgate
