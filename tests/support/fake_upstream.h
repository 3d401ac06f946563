// SPDX-License-Identifier: Apache-2.0
// FakeUpstream: an in-process HTTP/1.1 origin on 127.0.0.1:0 that records requests and misbehaves
// on demand, for fault-injection tests of the gateway.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tests/support/ev_util.h"
#include "tests/support/http_text.h"

namespace idemgate::test {

// What the upstream does once it has read a whole request.
enum class UpstreamAction {
  kRespond,            // status, headers, body with Content-Length; keep-alive honoured
  kResetAfterRequest,  // close with SO_LINGER 0: the peer sees a TCP RST
  kCloseAfterRequest,  // close cleanly (FIN) without answering
  kMalformed,          // garbage bytes, then close
  kHang,               // never answer; keep the connection open
  kPartial,            // status line + headers with Content-Length: 100, 10 body bytes, close
  kChunked,            // a valid chunked response carrying `body`; keep-alive honoured
  kCloseDelimited,     // no Content-Length: body, then close
  kInterim100,         // "HTTP/1.1 100 Continue\r\n\r\n", then the kRespond answer
  kBigBody,            // status with a Content-Length body of `big_body_size` bytes
};

struct UpstreamBehavior {
  UpstreamAction action = UpstreamAction::kRespond;
  int status = 200;
  std::string reason;  // empty: the standard phrase for `status`
  HeaderList headers;  // sent as given, before the framing header the action adds
  std::string body;
  int delay_ms = 0;          // wait (an evtimer) before acting, whatever the action
  size_t big_body_size = 0;  // kBigBody only

  static UpstreamBehavior Respond(int status, std::string body, HeaderList headers = {});
  static UpstreamBehavior Act(UpstreamAction action);
  static UpstreamBehavior BigBody(size_t n);
  UpstreamBehavior& WithDelay(int ms) {
    delay_ms = ms;
    return *this;
  }
};

// One request as the upstream received it.
struct RecordedRequest {
  std::string method;
  std::string target;
  std::string version;  // "HTTP/1.1"
  HeaderList headers;   // in arrival order, names as sent
  std::string body;
  int connection = 0;  // 1-based index of the accepted connection it came on

  // First value of the header named `name` (case-insensitive); nullopt when absent.
  std::optional<std::string> Header(std::string_view name) const;
  int HeaderCount(std::string_view name) const;
};

class FakeUpstream {
 public:
  FakeUpstream();
  ~FakeUpstream();
  FakeUpstream(const FakeUpstream&) = delete;
  FakeUpstream& operator=(const FakeUpstream&) = delete;

  // Binds 127.0.0.1:0 (or `ip`:`port`: a server that comes back on its port, a second address
  // such as 127.0.0.2) and starts the loop thread. False when already started or binding fails.
  bool Start(const std::string& ip = "127.0.0.1", uint16_t port = 0);
  // Stops the loop, joins its thread, and closes every connection. Idempotent.
  void Stop();
  uint16_t port() const { return port_; }

  // The behaviour for every request from now on (thread-safe).
  void SetBehavior(UpstreamBehavior behavior);
  // A one-shot behaviour: queued ones are used first, in order, one per request.
  void EnqueueBehavior(UpstreamBehavior behavior);

  int requests() const;
  int connections_accepted() const;
  int connections_open() const;
  std::vector<RecordedRequest> received() const;
  std::optional<RecordedRequest> last_request() const;

  // Wait until at least `n` requests (connections) arrived; false on timeout.
  bool WaitForRequests(int n, std::chrono::milliseconds timeout = std::chrono::seconds(5));
  bool WaitForConnections(int n, std::chrono::milliseconds timeout = std::chrono::seconds(5));

 private:
  struct Conn;
  static void OnAccept(evconnlistener*, evutil_socket_t fd, sockaddr*, int, void* arg);
  static void OnRead(bufferevent* bev, void* arg);
  static void OnWrite(bufferevent* bev, void* arg);
  static void OnEvent(bufferevent* bev, short what, void* arg);
  static void OnTimer(evutil_socket_t, short, void* arg);
  void ProcessInput(Conn* conn);
  UpstreamBehavior Record(RecordedRequest request);
  bool Act(Conn* conn);
  void WriteResponse(Conn* conn, const UpstreamBehavior& b);
  void Close(Conn* conn, bool reset);

  uint16_t port_ = 0;
  EventBasePtr base_;
  ListenerPtr listener_;
  LoopThread loop_;
  std::map<Conn*, std::unique_ptr<Conn>> conns_;  // loop thread only (and Stop after the join)

  mutable std::mutex mu_;
  std::condition_variable cv_;
  UpstreamBehavior behavior_;              // guarded by mu_
  std::deque<UpstreamBehavior> queued_;    // guarded by mu_
  std::vector<RecordedRequest> received_;  // guarded by mu_
  int connections_accepted_ = 0;           // guarded by mu_
  int connections_open_ = 0;               // guarded by mu_
};

}  // namespace idemgate::test
