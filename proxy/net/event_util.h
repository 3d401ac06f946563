// RAII for libevent handles, and one trampoline turning C callbacks into member calls.
#pragma once

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/listener.h>

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

// A one-shot timer bound to a member function; Arm() re-arms, Cancel() disarms.
class Timer {
 public:
  Timer() = default;
  template <typename T, void (T::*Method)()>
  void Init(event_base* base, T* self) {
    auto* cb = &EventTrampoline<T, Method>;
    ev_.reset(evtimer_new(base, cb, self));
  }
  void Arm(int64_t ms) {
    timeval tv{static_cast<time_t>(ms / 1000), static_cast<suseconds_t>((ms % 1000) * 1000)};
    evtimer_add(ev_.get(), &tv);
  }
  void Cancel() {
    if (ev_) evtimer_del(ev_.get());
  }
  bool armed() const { return ev_ && evtimer_pending(ev_.get(), nullptr); }
  bool initialized() const { return ev_ != nullptr; }

 private:
  EventPtr ev_;
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
