// SPDX-License-Identifier: Apache-2.0
// SocketReader (see socket_reader.h).
#include "proxy/net/socket_reader.h"

#include <sys/socket.h>

#include <algorithm>
#include <cerrno>

namespace idemgate {
namespace {
// libevent 2.1's bufferevent reads at most this much per callback (MAX_SINGLE_READ_DEFAULT).
constexpr size_t kMaxSingleRead = 16384;
}  // namespace

void SocketReader::Init(bufferevent* bev, ReadFn on_read, EventFn on_event, void* arg) {
  Reset();
  bev_ = bev;
  in_ = bufferevent_get_input(bev);
  on_read_ = on_read;
  on_event_ = on_event;
  arg_ = arg;
  ev_.reset(event_new(bufferevent_get_base(bev), bufferevent_getfd(bev), EV_READ | EV_PERSIST,
                      &SocketReader::OnReady, this));
}

void SocketReader::Reset() {
  if (ev_ == nullptr) return;
  ev_.reset();  // event_free deletes it first
  if (drained_cb_ != nullptr) evbuffer_remove_cb_entry(in_, drained_cb_);
  drained_cb_ = nullptr;
  enabled_ = false;
  suspended_ = false;
  high_ = 0;
}

void SocketReader::Enable() {
  if (ev_ == nullptr || enabled_) return;
  enabled_ = true;
  Watch();
}

void SocketReader::Disable() {
  if (ev_ == nullptr || !enabled_) return;
  enabled_ = false;
  event_del(ev_.get());
}

void SocketReader::SetHighWater(size_t high) {
  high_ = high;
  if (ev_ != nullptr) Suspend(high_ != 0 && evbuffer_get_length(in_) >= high_);
}

void SocketReader::Suspend(bool suspended) {
  if (suspended == suspended_) return;
  suspended_ = suspended;
  // The drain callback exists only while suspended: an evbuffer with any callback runs its
  // callback list on every add and drain. Removing it from inside it is safe (libevent takes
  // the next entry before calling one).
  if (suspended) {
    event_del(ev_.get());
    drained_cb_ = evbuffer_add_cb(in_, &SocketReader::OnInputDrained, this);
  } else {
    if (drained_cb_ != nullptr) evbuffer_remove_cb_entry(in_, drained_cb_);
    drained_cb_ = nullptr;
    Watch();
  }
}

void SocketReader::OnInputDrained(evbuffer* in, const evbuffer_cb_info*, void* arg) {
  auto* self = static_cast<SocketReader*>(arg);
  if (evbuffer_get_length(in) < self->high_ || self->high_ == 0) self->Suspend(false);
}

// Read into a buffer of the thread's, then added: an empty input buffer (each request drains
// it) would otherwise allocate, and then free, a 16 KiB chain for every read; the add takes a
// chain sized to what came. A bufferevent's input is frozen at its end but while the
// bufferevent itself reads into it (as bufferevent_readcb does): so here too.
ssize_t SocketReader::ReadInto(evutil_socket_t fd, size_t want) {
  thread_local char buf[kMaxSingleRead];
  const ssize_t n = recv(fd, buf, std::min(want, sizeof(buf)), 0);
  if (n <= 0) return n;
  evbuffer_unfreeze(in_, 0);
  const bool added = evbuffer_add(in_, buf, static_cast<size_t>(n)) == 0;
  evbuffer_freeze(in_, 0);
  if (added) return n;
  errno = ENOMEM;
  return -1;
}

void SocketReader::OnReady(evutil_socket_t fd, short, void* arg) {
  auto* self = static_cast<SocketReader*>(arg);
  size_t want = kMaxSingleRead;
  if (self->high_ != 0) {
    const size_t have = evbuffer_get_length(self->in_);
    if (have >= self->high_) return self->Suspend(true);
    want = std::min(want, self->high_ - have);
  }
  const ssize_t n = self->ReadInto(fd, want);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
  if (n <= 0) {
    const int error = errno;
    self->Disable();
    errno = error;  // EVUTIL_SOCKET_ERROR() in the callback tells what failed
    return self->on_event_(
        self->bev_, BEV_EVENT_READING | (n == 0 ? BEV_EVENT_EOF : BEV_EVENT_ERROR), self->arg_);
  }
  if (self->high_ != 0 && evbuffer_get_length(self->in_) >= self->high_) self->Suspend(true);
  self->on_read_(self->bev_, self->arg_);  // last: it may free this reader's owner
}

void EnableReading(SocketReader& reader, bufferevent* bev, bool on) {
  if (reader.initialized()) return on ? reader.Enable() : reader.Disable();
  if (on) {
    bufferevent_enable(bev, EV_READ);
  } else {
    bufferevent_disable(bev, EV_READ);
  }
}

}  // namespace idemgate
