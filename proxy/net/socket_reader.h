// SPDX-License-Identifier: Apache-2.0
// SocketReader: the read side of a plain TCP bufferevent, done here instead of by libevent.
// libevent 2.1's evbuffer_read asks ioctl(FIONREAD) how much is waiting before every read: a
// system call per read that nginx does not make, and nothing in the bufferevent API turns it
// off. The bufferevent keeps its writes, its write timeout and its write callbacks; its EV_READ
// stays disabled, and this reader fills its input buffer, as bufferevent_readcb would: the same
// read size, the same high watermark (reading stops while the input holds that much and starts
// again once it is drained below), and EOF or an error reported through the event callback
// with BEV_EVENT_READING, reading disabled.
#pragma once

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <sys/types.h>

#include <cstddef>

#include "proxy/net/event_util.h"

namespace idemgate {

class SocketReader {
 public:
  using ReadFn = void (*)(bufferevent*, void*);
  using EventFn = void (*)(bufferevent*, short, void*);

  SocketReader() = default;
  SocketReader(const SocketReader&) = delete;
  SocketReader& operator=(const SocketReader&) = delete;
  // Must go before the bufferevent it reads for (declare it after the owning pointer).
  ~SocketReader() { Reset(); }

  // Reads `bev`'s socket (connected already) into its input buffer; off until Enable.
  void Init(bufferevent* bev, ReadFn on_read, EventFn on_event, void* arg);
  void Reset();
  bool initialized() const { return ev_ != nullptr; }

  void Enable();
  void Disable();
  // bufferevent_setwatermark(EV_READ, 0, high); 0: none.
  void SetHighWater(size_t high);

 private:
  static void OnReady(evutil_socket_t fd, short, void* arg);
  static void OnInputDrained(evbuffer*, const evbuffer_cb_info*, void* arg);
  // One read of up to `want` bytes into the input buffer; errno is the read's.
  ssize_t ReadInto(evutil_socket_t fd, size_t want);
  // Reading stops while the input holds the high watermark; the drain callback resumes it.
  void Suspend(bool suspended);
  void Watch() {
    if (enabled_ && !suspended_) event_add(ev_.get(), nullptr);
  }

  bufferevent* bev_ = nullptr;
  evbuffer* in_ = nullptr;
  EventPtr ev_;
  evbuffer_cb_entry* drained_cb_ = nullptr;
  ReadFn on_read_ = nullptr;
  EventFn on_event_ = nullptr;
  void* arg_ = nullptr;
  size_t high_ = 0;
  bool enabled_ = false;
  bool suspended_ = false;  // by the high watermark
};

// Reading on or off: through `reader` when it reads the socket, else the bufferevent's own (TLS).
void EnableReading(SocketReader& reader, bufferevent* bev, bool on);

}  // namespace idemgate
