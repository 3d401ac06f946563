// SPDX-License-Identifier: Apache-2.0
// RAII for libevent handles, and one trampoline turning C callbacks into member calls.
#pragma once

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/listener.h>

#include <chrono>
#include <cstdint>
#include <memory>

namespace idemgate {

struct EventBaseDeleter {
  void operator()(event_base* b) const { event_base_free(b); }
};
struct EventDeleter {
  void operator()(event* e) const { event_free(e); }
};
struct BufferEventDeleter {
  void operator()(bufferevent* b) const { bufferevent_free(b); }
};
struct ListenerDeleter {
  void operator()(evconnlistener* l) const { evconnlistener_free(l); }
};

using EventBasePtr = std::unique_ptr<event_base, EventBaseDeleter>;
using EventPtr = std::unique_ptr<event, EventDeleter>;
using BufferEventPtr = std::unique_ptr<bufferevent, BufferEventDeleter>;
using ListenerPtr = std::unique_ptr<evconnlistener, ListenerDeleter>;

// Trampoline for event callbacks: Method is called on the object passed as `arg`.
template <typename T, void (T::*Method)()>
void EventTrampoline(evutil_socket_t, short, void* arg) {
  (static_cast<T*>(arg)->*Method)();
}

// A one-shot timer bound to a member function; Arm() re-arms, Cancel() disarms. Lazily, as
// nginx's timers: the libevent timer is added only when the new deadline comes before the one it
// already waits for, and Cancel() only marks it; when it fires, a deadline not yet due (a later
// Arm) is waited for again, and a cancelled one does nothing. A connection re-arms its timeout
// for every request: that costs a clock read, not a removal and an insertion in libevent's
// timer heap. The event's argument is the Timer itself, so a Timer never moves.
class Timer {
 public:
  Timer() = default;
  Timer(const Timer&) = delete;
  Timer& operator=(const Timer&) = delete;

  template <typename T, void (T::*Method)()>
  void Init(event_base* base, T* self) {
    self_ = self;
    fire_ = &EventTrampoline<T, Method>;
    ev_.reset(evtimer_new(base, &Timer::OnEvent, this));
    armed_ = false;
    scheduled_ = false;
  }
  void Arm(int64_t ms) {
    const Clock::time_point now = Clock::now();
    deadline_ = now + std::chrono::milliseconds(ms);
    armed_ = true;
    if (!scheduled_ || deadline_ < scheduled_for_) Schedule(now);
  }
  void Cancel() { armed_ = false; }
  // Frees the event (before its loop goes); Init() makes it again.
  void Reset() {
    ev_.reset();
    armed_ = false;
    scheduled_ = false;
  }
  bool armed() const { return armed_; }
  bool initialized() const { return ev_ != nullptr; }

 private:
  using Clock = std::chrono::steady_clock;

  void Schedule(Clock::time_point now) {
    const auto us = std::chrono::ceil<std::chrono::microseconds>(deadline_ - now).count();
    const int64_t wait = us < 0 ? 0 : us;
    timeval tv{static_cast<time_t>(wait / 1'000'000), static_cast<suseconds_t>(wait % 1'000'000)};
    evtimer_add(ev_.get(), &tv);
    scheduled_ = true;
    scheduled_for_ = deadline_;
  }
  static void OnEvent(evutil_socket_t, short, void* arg) {
    auto* t = static_cast<Timer*>(arg);
    t->scheduled_ = false;
    if (!t->armed_) return;
    const Clock::time_point now = Clock::now();
    if (now < t->deadline_) return t->Schedule(now);
    t->armed_ = false;
    t->fire_(-1, EV_TIMEOUT, t->self_);  // last: it may free the timer's owner
  }

  EventPtr ev_;
  void* self_ = nullptr;
  event_callback_fn fire_ = nullptr;
  Clock::time_point deadline_{};       // when the armed timer is due
  Clock::time_point scheduled_for_{};  // when the libevent timer fires (while scheduled_)
  bool armed_ = false;
  bool scheduled_ = false;
};

// Feeds what `in` holds to an llhttp-based parser (RequestParser, ResponseParser) until the
// parser has a whole message or an error; what it used is drained, the rest stays (pipelining).
template <typename Parser>
void FeedParser(evbuffer* in, Parser& parser) {
  while (evbuffer_get_length(in) > 0 && !parser.message_complete() && parser.error_free()) {
    size_t len = evbuffer_get_contiguous_space(in);
    const char* data = reinterpret_cast<const char*>(evbuffer_pullup(in, len));
    size_t used = parser.Feed(data, len);
    evbuffer_drain(in, used);
    if (used < len) break;
  }
}

}  // namespace idemgate
