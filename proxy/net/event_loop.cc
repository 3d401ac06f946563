// SPDX-License-Identifier: Apache-2.0
#include "proxy/net/event_loop.h"

#include <chrono>

#include "common/log.h"

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

// One pass of the loop; false when the backend failed (epoll_wait other than EINTR: libevent
// has logged it), which ends the loop as it ends event_base_loop without busy polling, instead
// of retrying at full speed.
bool Pass(event_base* base, int flags) {
  if (event_base_loop(base, flags | EVLOOP_NO_EXIT_ON_EMPTY) >= 0) return true;
  LogF(LogLevel::kError, "worker", "the event loop failed; the worker stops");
  return false;
}

}  // namespace

void RunEventLoop(event_base* base, int64_t busy_poll_us) {
  if (busy_poll_us <= 0) {
    Pass(base, 0);  // runs until loopexit or loopbreak
    return;
  }
  using Clock = std::chrono::steady_clock;
  const auto window = std::chrono::microseconds(busy_poll_us);
  // Each event_base_loop call starts by clearing the exit and break flags, so they are read
  // after every call, before the next.
  while (!Stopped(base)) {
    if (!Pass(base, EVLOOP_ONCE)) return;  // sleeps until an event
    HadEvents(base);                       // clears the count that pass left: the window starts
    Clock::time_point last = Clock::now();
    while (!Stopped(base)) {
      if (!Pass(base, EVLOOP_NONBLOCK)) return;  // epoll_wait(0)
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
