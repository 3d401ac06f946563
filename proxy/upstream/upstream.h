// SPDX-License-Identifier: Apache-2.0
// Connection pool to the origin, one per worker loop: send a request, parse its response,
// enforce connect and response timeouts, and reuse keep-alive connections.
#pragma once

#include <openssl/ssl.h>
#include <sys/socket.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "conf/config.h"
#include "proxy/http/http_message.h"
#include "proxy/net/event_util.h"
#include "proxy/upstream/upstream_types.h"

namespace idemgate {

struct UpstreamResult {
  UpstreamError error = UpstreamError::kNone;
  std::string detail;  // for logs
  Response response;   // when error == kNone
  // kUnavailable: the request, never sent, handed back (a group retries it on another server).
  std::string unsent_request;
};

// The Host for requests that came without one: the upstream's host, and its port unless default.
std::string UpstreamHost(const Config::Upstream& upstream);

// The result by reference (it lives in the frame that ends the call): passed on, not moved,
// through the group and the relay to whoever keeps what it needs.
using UpstreamCallback = std::function<void(UpstreamResult&&)>;

// Per-call limits, taken from the config the exchange started with (so reloads apply).
struct UpstreamLimits {
  int64_t connect_timeout_ms = 5'000;
  int64_t response_timeout_ms = 20'000;
  uint64_t max_response_body = 8 << 20;
  // A pooled connection idle this long (or longer) is not reused: upstream.idle_timeout.
  int64_t idle_timeout_ms = 1'000;
  // Neither timer runs past this: a guarded attempt must have its result stored while its lease
  // still holds (past it a retry may take the key over and execute it again).
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
  // The upstream group the call goes to: "" (or "default") = [upstream], else [upstreams.NAME].
  std::string group;
};

// The other end of a streamed call (passthrough): the response is handed on as it arrives.
class StreamReceiver {
 public:
  virtual ~StreamReceiver() = default;
  // Body empty, framing set. The receiver may move the fields out; the list itself goes back to
  // the parser afterwards (its room serves the next response).
  virtual void OnResponseHead(Response&& head) = 0;
  virtual void OnResponseBody(std::string_view piece) = 0;  // decoded (chunks unwrapped)
  // The request body written so far has (mostly) left: more may be written.
  virtual void OnRequestDrained() = 0;
  // What arrived so far was handed on and the response is not over: send it on now (pieces
  // may be gathered until this, to be written together).
  virtual void OnResponseFlush() = 0;
};

// A streamed call in progress, valid until its `done` ran or Cancel was called. The request's
// head went with SendStream; its body follows through WriteBody, framed as the head says.
class StreamCall {
 public:
  // `prefix`, `data` and `suffix` in one write (a chunk's size line, its data, its CRLF).
  virtual void WriteBody(std::string_view prefix, std::string_view data,
                         std::string_view suffix = {}) = 0;
  virtual void EndBody() = 0;                   // the request's last byte was written
  virtual size_t Unsent() const = 0;            // request bytes queued, not yet sent
  virtual void PauseResponse(bool paused) = 0;  // stop (resume) reading the response
  virtual void Cancel() = 0;  // the client is gone: the connection is closed, `done` never runs

 protected:
  ~StreamCall() = default;
};

class UpstreamConn;

class UpstreamPool {
 public:
  // Resolves the upstream address once (at start-up). ok() is false when it cannot.
  // `tls` (not owned; may be null) makes every connection https, verified against `upstream`'s
  // host name (SNI and certificate check).
  UpstreamPool(event_base* base, const HostPort& upstream, SSL_CTX* tls = nullptr);
  // A pool for one address `upstream`'s name resolved to (the name is still the TLS name).
  UpstreamPool(event_base* base, const HostPort& upstream, const sockaddr* addr, socklen_t len,
               SSL_CTX* tls);
  ~UpstreamPool();
  bool ok() const { return addr_len_ > 0; }
  // The server's name no longer resolves to this address: idle connections are closed, and
  // those of calls in progress are not pooled again when the calls end.
  void Retire();
  const std::string& error() const { return error_; }

  // Sends `request` (already serialized) on an idle pooled connection or a new one. `done` is
  // called exactly once, always from the loop and never from inside Send (unless the pool is
  // destroyed first, in which case it is never called).
  void Send(std::string request, bool head_request, const UpstreamLimits& limits,
            UpstreamCallback done);
  // The same for a streamed call: `head` is the request's head, the response goes to `receiver`
  // piece by piece (the result given to `done` has no body). limits.response_timeout_ms is the
  // longest silence in either direction (reading stops not counted), not a total.
  StreamCall* SendStream(std::string head, bool head_request, const UpstreamLimits& limits,
                         StreamReceiver* receiver, UpstreamCallback done);

  // Shutdown: every call in progress ends now with kFailed (kUnavailable if not yet connected),
  // so its exchange stores an indeterminate answer instead of being cut without one.
  void AbortAll(const std::string& detail);

  size_t idle() const { return idle_.size(); }
  size_t busy() const { return busy_.size(); }

  // Called by connections.
  void OnConnIdle(UpstreamConn* conn);
  void OnConnDead(UpstreamConn* conn);
  event_base* base() const { return base_; }
  const sockaddr* addr() const { return reinterpret_cast<const sockaddr*>(&addr_); }
  socklen_t addr_len() const { return addr_len_; }
  SSL_CTX* tls() const { return tls_; }
  uint64_t address_generation() const { return address_generation_; }  // +1 per Retire
  const std::string& host() const { return host_; }

 private:
  std::unique_ptr<UpstreamConn> TakeIdle(int64_t max_idle_ms);
  // Send and SendStream (`receiver` null: a plain call) on an idle connection or a new one.
  UpstreamConn* StartCall(std::string request, bool head_request, const UpstreamLimits& limits,
                          StreamReceiver* receiver, UpstreamCallback done);
  void Reap();

  event_base* base_;
  SSL_CTX* tls_;
  std::string host_;
  sockaddr_storage addr_{};
  socklen_t addr_len_ = 0;
  uint64_t address_generation_ = 0;
  std::string error_;
  // Vectors, so that a call moving a connection from idle to busy and back allocates nothing;
  // idle_ is kept in order (the most recently used at the back, taken first).
  std::vector<std::unique_ptr<UpstreamConn>> idle_;
  std::vector<std::unique_ptr<UpstreamConn>> busy_;
  std::list<std::unique_ptr<UpstreamConn>> dead_;  // freed on the next loop turn
  EventPtr reaper_;
};

}  // namespace idemgate
