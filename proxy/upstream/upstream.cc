// SPDX-License-Identifier: Apache-2.0
// Connection pool to the origin: one UpstreamConn (upstream_conn.h) per TCP connection, reused
// while keep-alive.
#include "proxy/upstream/upstream.h"

#include <event2/bufferevent_ssl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstring>
#include <vector>

#include "proxy/net/tls.h"
#include "proxy/upstream/upstream_conn.h"

namespace idemgate {

// The Host for requests that came without one: the upstream's host, and its port unless default.
std::string UpstreamHost(const Config::Upstream& upstream) {
  // Built in place (it is made for every request), at its final size: no temporaries, and no
  // allocation when it fits in the string itself ("127.0.0.1:8080").
  const std::string& host = upstream.addr.host;
  const bool bracket = host.find(':') != std::string::npos;  // an IPv6 literal
  char port[8] = {':'};
  size_t port_len = 0;
  if (upstream.addr.port != (upstream.tls ? 443 : 80)) {
    port_len = static_cast<size_t>(
        std::to_chars(port + 1, port + sizeof(port), upstream.addr.port).ptr - port);
  }
  std::string out(host.size() + (bracket ? 2 : 0) + port_len, '\0');
  char* p = out.data();
  if (bracket) *p++ = '[';
  memcpy(p, host.data(), host.size());
  p += host.size();
  if (bracket) *p++ = ']';
  memcpy(p, port, port_len);
  return out;
}

namespace {
constexpr size_t kMaxIdle = 256;
}  // namespace

UpstreamPool::UpstreamPool(event_base* base, const HostPort& upstream, SSL_CTX* tls)
    : base_(base), tls_(tls), host_(upstream.host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  std::string port = std::to_string(upstream.port);
  int rc = getaddrinfo(upstream.host.c_str(), port.c_str(), &hints, &res);
  if (rc != 0 || res == nullptr) {
    error_ = "cannot resolve upstream host '" + upstream.host + "': " + gai_strerror(rc);
  } else {
    memcpy(&addr_, res->ai_addr, res->ai_addrlen);
    addr_len_ = res->ai_addrlen;
  }
  if (res) freeaddrinfo(res);
  reaper_.reset(event_new(base, -1, 0, &EventTrampoline<UpstreamPool, &UpstreamPool::Reap>, this));
}

UpstreamPool::UpstreamPool(event_base* base, const HostPort& upstream, const sockaddr* addr,
                           socklen_t len, SSL_CTX* tls)
    : base_(base), tls_(tls), host_(upstream.host) {
  if (len <= sizeof(addr_)) {
    memcpy(&addr_, addr, len);
    addr_len_ = len;
  } else {
    error_ = "bad address for upstream host '" + upstream.host + "'";
  }
  reaper_.reset(event_new(base, -1, 0, &EventTrampoline<UpstreamPool, &UpstreamPool::Reap>, this));
}

UpstreamPool::~UpstreamPool() = default;

std::unique_ptr<UpstreamConn> UpstreamPool::TakeIdle(int64_t max_idle_ms) {
  while (!idle_.empty()) {
    std::unique_ptr<UpstreamConn> conn = std::move(idle_.back());
    idle_.pop_back();
    if (conn->Reusable(max_idle_ms)) return conn;
    dead_.push_back(std::move(conn));  // closed by the peer while idle: replace transparently
    event_active(reaper_.get(), 0, 0);
  }
  return nullptr;
}

void UpstreamPool::Send(std::string request, bool head_request, const UpstreamLimits& limits,
                        UpstreamCallback done) {
  StartCall(std::move(request), head_request, limits, nullptr, std::move(done));
}

StreamCall* UpstreamPool::SendStream(std::string head, bool head_request,
                                     const UpstreamLimits& limits, StreamReceiver* receiver,
                                     UpstreamCallback done) {
  return StartCall(std::move(head), head_request, limits, receiver, std::move(done));
}

UpstreamConn* UpstreamPool::StartCall(std::string request, bool head_request,
                                      const UpstreamLimits& limits, StreamReceiver* receiver,
                                      UpstreamCallback done) {
  std::unique_ptr<UpstreamConn> conn = TakeIdle(limits.idle_timeout_ms);
  UpstreamLimits use = limits;
  if (!conn) {
    conn = std::make_unique<UpstreamConn>(this);
    // Reported asynchronously, as promised: the connection dies on the next loop turn.
    if (!conn->Connect()) {
      use = UpstreamLimits{};
      use.connect_timeout_ms = 0;
      use.response_timeout_ms = 0;
      use.max_response_body = 0;
    }
  }
  UpstreamConn* raw = conn.get();
  busy_.push_back(std::move(conn));
  raw->Start(std::move(request), head_request, use, std::move(done), receiver);
  return raw;
}

void UpstreamPool::OnConnIdle(UpstreamConn* conn) {
  auto it = std::find_if(busy_.begin(), busy_.end(), [&](auto& c) { return c.get() == conn; });
  if (it == busy_.end()) return;
  if (idle_.size() >= kMaxIdle || !conn->Current()) {
    dead_.push_back(std::move(*it));
    event_active(reaper_.get(), 0, 0);
  } else {
    conn->MarkIdle();
    idle_.push_back(std::move(*it));
  }
  // busy_ has no order: the last one fills the gap.
  *it = std::move(busy_.back());
  busy_.pop_back();
}

void UpstreamPool::OnConnDead(UpstreamConn* conn) {
  for (auto* list : {&busy_, &idle_}) {
    auto it = std::find_if(list->begin(), list->end(), [&](auto& c) { return c.get() == conn; });
    if (it != list->end()) {
      dead_.push_back(std::move(*it));
      list->erase(it);
      event_active(reaper_.get(), 0, 0);
      return;
    }
  }
}

void UpstreamPool::AbortAll(const std::string& detail) {
  std::vector<UpstreamConn*> calls;
  for (auto& conn : busy_) calls.push_back(conn.get());
  for (UpstreamConn* conn : calls) conn->Abort(detail);
}

void UpstreamPool::Reap() { dead_.clear(); }

void UpstreamPool::Retire() {
  ++address_generation_;
  while (!idle_.empty()) {
    dead_.push_back(std::move(idle_.back()));
    idle_.pop_back();
  }
  event_active(reaper_.get(), 0, 0);
}

}  // namespace idemgate
