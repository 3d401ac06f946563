// SPDX-License-Identifier: Apache-2.0
// Runs an event loop until event_base_loopexit (or event_base_loopbreak from a callback: each
// pass clears a break asked for between passes), optionally busy-polling:
// after its last event the loop keeps polling with a zero timeout for `busy_poll_us` before it
// sleeps in epoll_wait. Where an idle CPU is slow to wake (a VM whose vCPUs halt when idle),
// the next request then finds the thread running instead of waiting for the wake-up; the price
// is a CPU kept busy for that long after every event. HAProxy's `busy-polling` is the same idea
// with no bound. Any event restarts the window, a timer's too: a timer that fires more often
// than the window keeps the thread polling.
#pragma once

#include <event2/event.h>

#include <cstdint>

namespace idemgate {

// busy_poll_us <= 0: event_base_loop(base, EVLOOP_NO_EXIT_ON_EMPTY), unchanged.
void RunEventLoop(event_base* base, int64_t busy_poll_us);

}  // namespace idemgate
