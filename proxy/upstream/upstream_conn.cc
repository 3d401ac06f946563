// SPDX-License-Identifier: Apache-2.0
// UpstreamConn (see upstream_conn.h).
#include "proxy/upstream/upstream_conn.h"

#include <event2/bufferevent_ssl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "proxy/net/tls.h"

namespace idemgate {

bool UpstreamConn::Connect() {
  connecting_ = true;  // also on failure below: Start then reports kUnavailable, never sends
  address_generation_ = pool_->address_generation();
  if (pool_->tls() != nullptr) {
    SSL* ssl = NewUpstreamSsl(pool_->tls(), pool_->host());
    if (ssl == nullptr) return false;
    // No dirty shutdowns: a TCP close without close_notify is an error, not an EOF that
    // could complete a truncated close-delimited body (see also CleanTlsClose).
    bev_.reset(bufferevent_openssl_socket_new(pool_->base(), -1, ssl, BUFFEREVENT_SSL_CONNECTING,
                                              BEV_OPT_CLOSE_ON_FREE));
  } else {
    bev_.reset(bufferevent_socket_new(pool_->base(), -1, BEV_OPT_CLOSE_ON_FREE));
  }
  if (!bev_) return false;
  SetCallbacks();
  // Plain TCP is read by reader_ once connected (socket_reader.h); TLS by the bufferevent.
  bufferevent_enable(bev_.get(), pool_->tls() != nullptr ? EV_READ | EV_WRITE : EV_WRITE);
  if (bufferevent_socket_connect(bev_.get(), pool_->addr(), static_cast<int>(pool_->addr_len())) <
      0) {
    return false;
  }
  evutil_socket_t fd = bufferevent_getfd(bev_.get());
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return true;
}

bool UpstreamConn::Reusable(int64_t max_idle_ms) const {
  if (std::chrono::steady_clock::now() - idle_since_ >= std::chrono::milliseconds(max_idle_ms)) {
    return false;
  }
  char byte;
  ssize_t n = recv(bufferevent_getfd(bev_.get()), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

size_t UpstreamConn::Unsent() const {
  return request_.size() + (bev_ ? evbuffer_get_length(bufferevent_get_output(bev_.get())) : 0);
}

void UpstreamConn::PauseResponse(bool paused) {
  if (!done_ || !bev_ || paused == paused_) return;
  paused_ = paused;
  if (paused) {
    EnableRead(false);
    if (!connecting_) timer_.Cancel();
    return;
  }
  EnableRead(true);
  Touch();
  if (!connecting_) timer_.Arm(limits_.response_timeout_ms);
  StreamRead();  // what waited in the input buffer
  if (done_ && eof_pending_ && !paused_) OnEof();
}

void UpstreamConn::Cancel() {
  done_ = nullptr;
  receiver_ = nullptr;
  timer_.Cancel();
  Die();
}

void UpstreamConn::Abort(const std::string& detail) {
  if (!done_) return;
  Fail(connecting_ ? UpstreamError::kUnavailable : UpstreamError::kFailed, detail);
}

void UpstreamConn::EventCb(bufferevent*, short what, void* arg) {
  static_cast<UpstreamConn*>(arg)->OnEvent(what);
}

void UpstreamConn::WriteCb(bufferevent*, void* arg) {
  auto* self = static_cast<UpstreamConn*>(arg);
  if (self->done_ && self->receiver_) {
    self->Touch();
    self->receiver_->OnRequestDrained();
  }
}

void UpstreamConn::StartStream(bool head) {
  parser_->Begin(head, [this](std::string_view piece) {
    if (receiver_) receiver_->OnResponseBody(piece);
  });
  head_sent_ = false;
  paused_ = false;
  eof_pending_ = false;
  request_ended_ = false;
  Touch();
  if (!bev_) return;
  bufferevent_setcb(bev_.get(), ReadCb, WriteCb, EventCb, this);
}

void UpstreamConn::EndStream() {
  receiver_ = nullptr;
  if (!bev_) return;
  SetCallbacks();
  if (paused_) EnableRead(true);
  paused_ = false;
}

int64_t UpstreamConn::CappedMs(int64_t ms) const {
  if (limits_.deadline == std::chrono::steady_clock::time_point::max()) return ms;
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      limits_.deadline - std::chrono::steady_clock::now());
  return std::clamp<int64_t>(left.count(), 0, ms);
}

void UpstreamConn::SendRequest() {
  timer_.Arm(CappedMs(limits_.response_timeout_ms));
  // Straight to the socket when nothing is queued (no EPOLLOUT round trip); the rest, if the
  // socket took only part, goes through the bufferevent.
  size_t sent = 0;
  if (pool_->tls() == nullptr && evbuffer_get_length(bufferevent_get_output(bev_.get())) == 0) {
    ssize_t n = send(bufferevent_getfd(bev_.get()), request_.data(), request_.size(),
                     MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) sent = static_cast<size_t>(n);
  }
  if (sent < request_.size()) {
    bufferevent_write(bev_.get(), request_.data() + sent, request_.size() - sent);
  }
  std::string().swap(request_);  // an idle pooled connection keeps no request buffer
}

void UpstreamConn::OnRead() {
  evbuffer* in = bufferevent_get_input(bev_.get());
  if (!done_) {  // bytes while idle: the peer broke protocol; drop the connection
    Die();
    return;
  }
  if (receiver_) return StreamRead();
  FeedParser(in, *parser_);
  Progress(evbuffer_get_length(in) > 0);
}

void UpstreamConn::StreamRead() {
  if (paused_ || !done_) return;
  evbuffer* in = bufferevent_get_input(bev_.get());
  if (evbuffer_get_length(in) > 0) Touch();
  while (evbuffer_get_length(in) > 0 && !paused_ && parser_->error_free() &&
         !parser_->message_complete()) {
    size_t len = evbuffer_get_contiguous_space(in);
    const char* data = reinterpret_cast<const char*>(evbuffer_pullup(in, len));
    size_t used = parser_->Feed(data, len);
    evbuffer_drain(in, used);
    if (!done_) return;  // cancelled by the receiver
    if (parser_->headers_complete() && !head_sent_ && parser_->error_free()) {
      head_sent_ = true;
      Response head = parser_->TakeHead();
      receiver_->OnResponseHead(std::move(head));
      if (!done_) return;
      parser_->GiveBackHeaders(std::move(head.headers));
      continue;
    }
    if (used < len) break;
  }
  if (parser_->error_free() && !parser_->message_complete()) {
    if (receiver_ != nullptr) receiver_->OnResponseFlush();
    return;
  }
  Progress(evbuffer_get_length(in) > 0);
}

void UpstreamConn::Progress(bool leftover) {
  if (parser_->error() == ParseError::kBodyTooLarge) {
    return Fail(UpstreamError::kTooLarge, parser_->error_detail());
  }
  if (parser_->error() != ParseError::kNone) {
    return Fail(UpstreamError::kFailed, "malformed response: " + parser_->error_detail());
  }
  if (!parser_->message_complete()) return;
  UpstreamResult result;
  result.response = parser_->TakeResponse();
  // An answer that came before the whole request left (an early 413, say) leaves the rest of
  // the request queued: on reuse the upstream would read it as the start of the next request.
  bool unsent = evbuffer_get_length(bufferevent_get_output(bev_.get())) > 0 ||
                (receiver_ != nullptr && !request_ended_);
  bool reusable = result.response.keep_alive && !leftover && !eof_ && !unsent;
  Finish(std::move(result), reusable);
}

void UpstreamConn::OnEvent(short what) {
  if (what & BEV_EVENT_CONNECTED) {
    connecting_ = false;
    timer_.Cancel();
    if (pool_->tls() == nullptr) {
      reader_.Init(bev_.get(), ReadCb, EventCb, this);
      EnableRead(!paused_);
    }
    if (done_) SendRequest();
    return;
  }
  if (!done_) return Die();  // idle connection closed or failed
  if (connecting_) return Fail(UpstreamError::kUnavailable, ConnectFailure());
  if (what & BEV_EVENT_EOF) {
    eof_ = true;
    OnRead();  // anything still buffered
    if (!done_) return;
    if (paused_) {  // the client is behind: the end is handled once the rest is read
      eof_pending_ = true;
      return;
    }
    return OnEof();
  }
  Fail(UpstreamError::kFailed,
       std::string("upstream connection error: ") + strerror(EVUTIL_SOCKET_ERROR()));
}

void UpstreamConn::OnEof() {
  eof_pending_ = false;
  // Over TLS only close_notify proves the peer ended the stream: a bare TCP close may be a
  // cut, and a close-delimited body it "completes" may be truncated (indeterminate, R4).
  if (!CleanTlsClose()) {
    return Fail(UpstreamError::kFailed,
                "TLS upstream closed the connection without close_notify before a complete "
                "response; what arrived may be truncated");
  }
  parser_->FeedEof();
  if (parser_->message_complete() || parser_->error() != ParseError::kNone) {
    return Progress(false);
  }
  Fail(UpstreamError::kFailed, "upstream closed the connection before responding");
}

bool UpstreamConn::CleanTlsClose() const {
  if (pool_->tls() == nullptr) return true;
  SSL* ssl = bufferevent_openssl_get_ssl(bev_.get());
  return ssl != nullptr && (SSL_get_shutdown(ssl) & SSL_RECEIVED_SHUTDOWN) != 0;
}

std::string UpstreamConn::ConnectFailure() {
  const int socket_error = EVUTIL_SOCKET_ERROR();
  if (pool_->tls() != nullptr) {
    std::string tls = DescribeTlsFailure(bufferevent_openssl_get_ssl(bev_.get()),
                                         bufferevent_get_openssl_error(bev_.get()), pool_->host());
    if (!tls.empty()) return tls;
    if (TcpConnected()) return "TLS handshake failed: the upstream closed the connection";
  }
  return std::string("connect failed: ") + strerror(socket_error);
}

bool UpstreamConn::TcpConnected() const {
  sockaddr_storage peer{};
  socklen_t len = sizeof(peer);
  return getpeername(bufferevent_getfd(bev_.get()), reinterpret_cast<sockaddr*>(&peer), &len) == 0;
}

void UpstreamConn::OnTimeout() {
  if (connecting_) {
    return Fail(UpstreamError::kUnavailable, pool_->tls() != nullptr && TcpConnected()
                                                 ? "TLS handshake timeout"
                                                 : "connect timeout");
  }
  if (receiver_) return OnStreamTimeout();
  // After a pause (SIGSTOP, a stalled VM) the timer and the answer are due together, and the
  // timer may run first (epoll_wait returns EINTR on SIGCONT, so the loop handles timers
  // before it polls). What already arrived is read before a timeout is declared: the timer
  // goes again at once, after the next poll has run the read callback. Bounded, so an
  // upstream that trickles bytes cannot extend the call for long.
  if (late_rounds_ < MaxLateRounds() && InputWaiting()) {
    ++late_rounds_;
    timer_.Arm(0);
    return;
  }
  Fail(UpstreamError::kTimeout, "no complete response within upstream.response_timeout");
}

void UpstreamConn::OnStreamTimeout() {
  using namespace std::chrono;
  auto quiet = duration_cast<milliseconds>(steady_clock::now() - last_activity_).count();
  if (quiet < limits_.response_timeout_ms) {
    timer_.Arm(limits_.response_timeout_ms - quiet);
    return;
  }
  if (late_rounds_ < 64 && InputWaiting()) {
    ++late_rounds_;
    timer_.Arm(0);
    return;
  }
  Fail(UpstreamError::kTimeout, "no byte to or from the upstream within upstream.response_timeout");
}

bool UpstreamConn::InputWaiting() const {
  char byte;
  return recv(bufferevent_getfd(bev_.get()), &byte, 1, MSG_PEEK | MSG_DONTWAIT) >= 0;
}

void UpstreamConn::Fail(UpstreamError error, std::string detail) {
  UpstreamResult result;
  result.error = error;
  result.detail = std::move(detail);
  if (error == UpstreamError::kUnavailable) result.unsent_request = std::move(request_);
  Finish(std::move(result), false);
}

void UpstreamConn::Finish(UpstreamResult&& result, bool reusable) {
  timer_.Cancel();
  UpstreamCallback done = std::move(done_);
  done_ = nullptr;
  if (receiver_) EndStream();
  if (reusable) {
    pool_->OnConnIdle(this);
  } else {
    Die();
  }
  done(std::move(result));
}

void UpstreamConn::Die() {
  reader_.Disable();
  if (bev_) bufferevent_disable(bev_.get(), EV_READ | EV_WRITE);
  pool_->OnConnDead(this);
}

void UpstreamConn::EnableRead(bool on) { EnableReading(reader_, bev_.get(), on); }

}  // namespace idemgate
