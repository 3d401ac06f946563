// SPDX-License-Identifier: Apache-2.0
// RAII owners for the libevent handles the test-support library uses, and one-time setup.
#pragma once

#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/listener.h>
#include <unistd.h>

#include <memory>
#include <thread>

namespace idemgate::test {

struct EventBaseDeleter {
  void operator()(event_base* b) const { event_base_free(b); }
};
struct EventDeleter {
  void operator()(event* e) const { event_free(e); }
};
struct EvhttpDeleter {
  void operator()(evhttp* h) const { evhttp_free(h); }
};
struct BuffereventDeleter {
  void operator()(bufferevent* b) const { bufferevent_free(b); }
};
struct ListenerDeleter {
  void operator()(evconnlistener* l) const { evconnlistener_free(l); }
};

using EventBasePtr = std::unique_ptr<event_base, EventBaseDeleter>;
using EventPtr = std::unique_ptr<event, EventDeleter>;
using EvhttpPtr = std::unique_ptr<evhttp, EvhttpDeleter>;
using BuffereventPtr = std::unique_ptr<bufferevent, BuffereventDeleter>;
using ListenerPtr = std::unique_ptr<evconnlistener, ListenerDeleter>;

// An owned file descriptor, closed on destruction.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& o) noexcept : fd_(o.Release()) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept {
    if (this != &o) Reset(o.Release());
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { Reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int Release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void Reset(int fd = -1) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_ = -1;
};

// Runs an event_base's loop on its own thread until Stop(), which any thread may call, even
// before the loop started (a stop event is activated rather than a flag that the loop resets).
class LoopThread {
 public:
  LoopThread() = default;
  ~LoopThread() { Stop(); }
  LoopThread(const LoopThread&) = delete;
  LoopThread& operator=(const LoopThread&) = delete;

  bool Start(event_base* base);
  // Breaks the loop and joins the thread. Idempotent.
  void Stop();
  bool running() const { return thread_.joinable(); }

 private:
  static void OnStop(evutil_socket_t, short, void* arg);
  event_base* base_ = nullptr;
  EventPtr stop_;
  std::thread thread_;
};

// Enables libevent's pthread locking (so another thread may stop a loop) and ignores SIGPIPE
// (a peer closing mid-write must not kill the test process). Idempotent; call before making bases.
void InitLibeventOnce();

}  // namespace idemgate::test
