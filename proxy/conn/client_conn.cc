// SPDX-License-Identifier: Apache-2.0
// One client connection: parse requests one at a time, hand each to an Exchange, write answers
// in order, and close politely (lingering) when the byte stream can no longer be trusted.
#include "proxy/conn/client_conn.h"

#include <event2/bufferevent_ssl.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <cerrno>

#include "proxy/conn/h2_conn.h"
#include "proxy/conn/unsent_budget.h"
#include "proxy/exchange/exchange.h"
#include "proxy/policy/routes.h"

namespace idemgate {

namespace {
constexpr size_t kReadHighWater = 256 << 10;  // stop reading while this much waits unparsed
constexpr int64_t kLingerMs = 2'000;          // read and discard after the last answer
constexpr char kContinue[] = "HTTP/1.1 100 Continue\r\n\r\n";
constexpr unsigned char kTlsHandshakeRecord = 0x16;  // the first byte of every ClientHello

}  // namespace

ClientConn::ClientConn(ClientEnv* env, evutil_socket_t fd, std::string peer_ip, SSL* tls)
    : env_(env), peer_ip_(std::move(peer_ip)), relay_(env, this, client_ip_), tls_(tls != nullptr) {
  fd_ = fd;
  if (tls != nullptr) {
    pending_tls_ = tls;
  } else {
    bev_.reset(bufferevent_socket_new(env->base(), fd, BEV_OPT_CLOSE_ON_FREE));
  }
}

ClientConn::~ClientConn() {
  h2_.reset();  // its exchanges detach
  if (exchange_) exchange_->DetachClient();
  if (pending_tls_ != nullptr) {
    SSL_free(pending_tls_);
    evutil_closesocket(fd_);
  }
}

void ClientConn::Start() {
  if (env_->Snapshot()->listen.proxy_protocol) return AwaitProxyHeader();
  StartTransport();
}

void ClientConn::StartTransport() {
  if (pending_tls_ == nullptr) return StartStream(true);
  // A TLS port: wait for the first byte (within the idle timeout) to tell a ClientHello from
  // plain HTTP, which gets a readable 400 instead of a failed handshake (as nginx does).
  if (!timer_.initialized()) timer_.Init<ClientConn, &ClientConn::OnTimer>(env_->base(), this);
  sniff_.reset(event_new(env_->base(), fd_, EV_READ,
                         &EventTrampoline<ClientConn, &ClientConn::OnFirstBytes>, this));
  event_add(sniff_.get(), nullptr);
  timer_.Arm(env_->Snapshot()->limits.idle_timeout_ms);
}

void ClientConn::OnFirstBytes() {
  unsigned char first = 0;
  ssize_t n = recv(fd_, &first, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
    event_add(sniff_.get(), nullptr);
    return;
  }
  if (n <= 0) return Close(n == 0 ? CloseReason::kClientClosed : CloseReason::kSocketError);
  timer_.Cancel();
  SSL* tls = pending_tls_;
  pending_tls_ = nullptr;
  if (first == kTlsHandshakeRecord) {
    bev_.reset(bufferevent_openssl_socket_new(env_->base(), fd_, tls, BUFFEREVENT_SSL_ACCEPTING,
                                              BEV_OPT_CLOSE_ON_FREE));
    if (bev_) bufferevent_openssl_set_allow_dirty_shutdown(bev_.get(), 1);
    return StartStream(true);
  }
  SSL_free(tls);
  tls_ = false;
  bev_.reset(bufferevent_socket_new(env_->base(), fd_, BEV_OPT_CLOSE_ON_FREE));
  StartStream(false);
  RespondError(ErrorCode::kBadRequest,
               "This port speaks HTTPS: the plain HTTP request was sent to a TLS port; use "
               "https://.");
}

// `serve`: read requests; otherwise only the answer RespondError queues next is written.
void ClientConn::StartStream(bool serve) {
  bufferevent_setcb(bev_.get(), ReadCb, WriteCb, EventCb, this);
  if (tls_) {
    bufferevent_setwatermark(bev_.get(), EV_READ, 0, kReadHighWater);
    bufferevent_enable(bev_.get(), EV_READ | EV_WRITE);
  } else {  // plain TCP: read without libevent's FIONREAD before each read (socket_reader.h)
    reader_.Init(bev_.get(), ReadCb, EventCb, this);
    reader_.SetHighWater(kReadHighWater);
    bufferevent_enable(bev_.get(), EV_WRITE);
    reader_.Enable();
  }
  if (!timer_.initialized()) timer_.Init<ClientConn, &ClientConn::OnTimer>(env_->base(), this);
  resume_.reset(
      event_new(env_->base(), -1, 0, &EventTrampoline<ClientConn, &ClientConn::OnWritten>, this));
  if (serve) BeginIdle();
}

void ClientConn::ReadCb(bufferevent*, void* arg) {
  auto* self = static_cast<ClientConn*>(arg);
  if (self->state_ == State::kLingering) {
    evbuffer_drain(bufferevent_get_input(self->bev_.get()), SIZE_MAX);
    return;
  }
  if (self->h2_) return self->h2_->OnRead();
  if (self->state_ == State::kIdle && !self->parser_->started() && self->TryHttp2()) return;
  // New bytes on an idle connection begin a request: it gets the limits in force now (a
  // reload may have come while the connection sat idle). BeginIdle refreshed them already for
  // bytes that were waiting then.
  if (self->state_ == State::kIdle && !self->parser_->started()) self->RefreshLimits();
  self->ProcessInput();
}

void ClientConn::WriteCb(bufferevent*, void* arg) {
  auto* self = static_cast<ClientConn*>(arg);
  if (self->h2_) return self->h2_->OnWritten();
  self->OnWritten();
}

void ClientConn::EventCb(bufferevent*, short what, void* arg) {
  auto* self = static_cast<ClientConn*>(arg);
  if (what & BEV_EVENT_CONNECTED) return;  // the TLS handshake finished
  if (self->h2_) {
    const bool lingering = self->state_ == State::kLingering;  // after GOAWAY: the client left
    return self->Close((what & BEV_EVENT_ERROR) ? CloseReason::kSocketError
                       : lingering              ? CloseReason::kAfterAnswer
                                                : CloseReason::kClientClosed);
  }
  if ((what & BEV_EVENT_EOF) && !(what & BEV_EVENT_ERROR)) {
    self->read_eof_ = true;
    if (self->exchange_ != nullptr) self->exchange_->ClientClosed();  // logged as 499
    // A duplicate waiting for a first answer (SPEC §10 W3) is dropped with its client: nothing
    // of it went upstream, and its retry replays.
    if (self->exchange_ != nullptr && self->exchange_->phase() == Phase::kWaiting) {
      return self->Close(CloseReason::kClientClosed);
    }
    // A half-closed client still gets the answer to the request it completed.
    if (self->state_ == State::kIdle || self->state_ == State::kReading ||
        (self->state_ == State::kRelaying && !self->relay_.request_done())) {
      self->Close(CloseReason::kClientClosed);
    } else if (self->state_ == State::kLingering) {
      self->Close(CloseReason::kAfterAnswer);
    }
    return;
  }
  self->Close(CloseReason::kSocketError);
}

void ClientConn::BeginIdle() {
  state_ = State::kIdle;
  continue_sent_ = false;
  if (read_eof_) return Close(CloseReason::kClientClosed);
  if (env_->draining()) return Close(CloseReason::kShutdown);
  std::shared_ptr<const Config> config = RefreshLimits();
  // A client that takes nothing of an answer for idle_timeout is dropped (EventCb), so it
  // cannot hold its buffered answer and its descriptor forever. libevent re-arms this timeout
  // on every successful write, so a slow but steady reader is never cut off.
  int64_t write_ms = config->limits.idle_timeout_ms;
  timeval write_tv{static_cast<time_t>(write_ms / 1000),
                   static_cast<suseconds_t>((write_ms % 1000) * 1000)};
  bufferevent_set_timeouts(bev_.get(), nullptr, &write_tv);
  timer_.Arm(config->limits.idle_timeout_ms);
  ProcessInput();
}

// The limits of the config in force now (a reload may have changed them since the last
// request): applied when a request begins, before any of its bytes is parsed.
std::shared_ptr<const Config> ClientConn::RefreshLimits() {
  std::shared_ptr<const Config> config = env_->Snapshot();
  if (config != parser_config_) {
    parser_ =
        std::make_unique<RequestParser>(MaxRequestBody(*config), config->limits.max_header_bytes);
    parser_->set_decide_body(true);  // passthrough bodies stream; guarded ones are limited
    parser_config_ = config;
  }
  client_timeout_ms_ = config->limits.client_timeout_ms;
  return config;
}

void ClientConn::ProcessInput() {
  const bool relaying_body = state_ == State::kRelaying && !relay_.request_done();
  if (state_ != State::kIdle && state_ != State::kReading && !relaying_body) return;
  if (relay_.request_paused()) return;
  FeedParser(bufferevent_get_input(bev_.get()), *parser_);
  OnParsed();
}

void ClientConn::OnParsed() {
  if (parser_->error() != ParseError::kNone) {
    if (state_ == State::kRelaying) {
      return AbortRelay(ErrorCodeFor(parser_->error()), parser_->error_detail());
    }
    return RespondError(ErrorCodeFor(parser_->error()), parser_->error_detail());
  }
  if (parser_->started() && state_ == State::kIdle) {
    state_ = State::kReading;
    timer_.Arm(client_timeout_ms_);  // from the request's first byte
  }
  if (parser_->headers_complete() && !parser_->body_decided()) {
    if (!DecideBody()) return;
    ProcessInput();  // the body (or the rest of the relay) follows
    // A relayed request goes upstream with as much of its body as came with its head.
    if (state_ == State::kRelaying && !relay_.call_started()) relay_.StartCall();
    return;
  }
  if (state_ == State::kRelaying) {
    if (parser_->message_complete()) {
      // Ready for the next request; its bytes wait in the input buffer until this answer is out.
      parser_->DropRequest();
      relay_.RequestEnd();
    } else {
      relay_.CheckUpstreamBacklog();
    }
    return;
  }
  if (parser_->message_complete()) return StartExchange();
  if (parser_->headers_complete() && parser_->request().expect_continue && !continue_sent_) {
    continue_sent_ = true;
    bufferevent_write(bev_.get(), kContinue, sizeof(kContinue) - 1);
  }
}

void ClientConn::StartExchange() {
  timer_.Cancel();
  state_ = State::kExchange;
  Request request = parser_->TakeRequest();
  close_after_ = !request.keep_alive || env_->draining();
  head_request_ = request.method == "HEAD";
  http10_ = request.http_minor == 0;
  // The route DecideBody chose (Exchange::Start need not match it again), unless a reload came
  // since the parser's config was read: then the exchange runs under the current config.
  std::shared_ptr<const Config> config = env_->Snapshot();
  if (config == parser_config_ && route_ != nullptr) config = route_;
  route_ = nullptr;
  client_ip_ = BelievedClient(peer_ip_, config->listen.trusted, &request);
  exchange_ = env_->NewExchange(this, std::move(config), std::move(request), client_ip_, tls_);
  exchange_->Start();  // may answer at once (SendResponse)
}

void ClientConn::SendResponse(std::shared_ptr<const StoredResponse> response, bool replayed,
                              std::string_view extra_headers) {
  // This request's X-Request-Id goes back with its answer (a replay's too: not the stored one).
  const std::string request_id = exchange_                     ? exchange_->request_id()
                                 : state_ == State::kRelaying ? relay_.request_id()
                                                              : std::string();
  exchange_ = nullptr;
  if (state_ != State::kExchange && state_ != State::kRelaying) return;
  bool close = close_after_ || read_eof_ || env_->draining();
  state_ = close ? State::kClosing : State::kWriting;
  ConnectionHeader connection = close     ? ConnectionHeader::kClose
                                : http10_ ? ConnectionHeader::kKeepAlive
                                          : ConnectionHeader::kNone;
  bool send_body = false;
  std::string head = SerializeResponseHead(*response, replayed, connection, head_request_,
                                           &send_body, extra_headers, request_id);
  if (!Write(std::move(head), send_body ? std::move(response) : nullptr)) {
    return Close(CloseReason::kWriteFailed);
  }
  // WriteCb continues once a queued answer has left the buffer (back-pressure for pipelining);
  // an answer the socket took at once continues on the next loop turn (no recursion).
  if (evbuffer_get_length(bufferevent_get_output(bev_.get())) == 0)
    event_active(resume_.get(), 0, 0);
}

// Sends what the socket takes right away (saving the epoll round trip and the EPOLLOUT
// arming a buffered write costs); the rest of the head is copied to the output buffer and the
// rest of the body goes there by reference, so a large answer exists once while it drains to a
// slow reader, however many connections send it. False when the write failed or the body would
// pass limits.max_unsent_bytes.
bool ClientConn::Write(std::string head, std::shared_ptr<const StoredResponse> body) {
  evbuffer* out = bufferevent_get_output(bev_.get());
  const std::string_view body_bytes = body ? std::string_view(body->body) : std::string_view();
  size_t sent = 0;
  if (!tls_ && evbuffer_get_length(out) == 0) {
    iovec parts[2] = {{head.data(), head.size()},
                      {const_cast<char*>(body_bytes.data()), body_bytes.size()}};
    msghdr msg{};
    msg.msg_iov = parts;
    msg.msg_iovlen = body_bytes.empty() ? 1 : 2;
    ssize_t n = sendmsg(bufferevent_getfd(bev_.get()), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) sent = static_cast<size_t>(n);
  }
  if (sent < head.size() && evbuffer_add(out, head.data() + sent, head.size() - sent) != 0) {
    return false;
  }
  size_t body_sent = sent > head.size() ? sent - head.size() : 0;
  if (body_sent == body_bytes.size()) return true;
  return QueueBody(out, std::move(body), body_sent);
}

// The unsent rest of `body` (from `offset`), by reference: the buffer keeps the response alive
// and its share of limits.max_unsent_bytes charged until that part is written or dropped.
bool ClientConn::QueueBody(evbuffer* out, std::shared_ptr<const StoredResponse> body,
                           size_t offset) {
  std::shared_ptr<const void> charge = body;
  if (UnsentBudget* budget = env_->unsent()) {
    uint64_t limit = env_->Snapshot()->limits.max_unsent_bytes;
    charge = budget->Charge(body, limit);
    if (!charge) {
      env_->RecordAnswerDropped();
      return false;
    }
  }
  auto* holder = new std::shared_ptr<const void>(std::move(charge));
  const std::string& bytes = body->body;
  if (evbuffer_add_reference(
          out, bytes.data() + offset, bytes.size() - offset,
          [](const void*, size_t, void* arg) {
            delete static_cast<std::shared_ptr<const void>*>(arg);
          },
          holder) != 0) {
    delete holder;
    return false;
  }
  return true;
}

void ClientConn::OnWritten() {
  if (closed_) return;
  if (state_ == State::kRelaying) return OnRelayWritten();
  if (state_ == State::kWriting) {
    BeginIdle();
  } else if (state_ == State::kClosing) {
    BeginLinger();
  }
}

void ClientConn::RespondError(ErrorCode code, const std::string& detail) {
  timer_.Cancel();
  std::string bytes =
      SerializeResponse(MakeErrorResponse(code, detail), false, ConnectionHeader::kClose, false);
  env_->RecordConnectionError(code, http10_ ? Protocol::kHttp10 : Protocol::kHttp11, peer_ip_,
                              bytes.size());
  state_ = State::kClosing;
  bufferevent_write(bev_.get(), bytes.data(), bytes.size());
}

// After the last answer: half-close, then read and discard for a while, so the client sees
// the answer rather than a reset caused by its own unread bytes.
void ClientConn::BeginLinger() {
  state_ = State::kLingering;
  shutdown(bufferevent_getfd(bev_.get()), SHUT_WR);
  evbuffer_drain(bufferevent_get_input(bev_.get()), SIZE_MAX);
  timer_.Arm(kLingerMs);
}

void ClientConn::OnTimer() {
  switch (state_) {
    case State::kReading:
      return RespondError(ErrorCode::kRequestTimeout, "");
    case State::kIdle:
      return Close(CloseReason::kIdleTimeout);
    case State::kLingering:
      return Close(CloseReason::kAfterAnswer);
    default:
      return;
  }
}

// Whether the connection's first bytes are the HTTP/2 preface (by prior knowledge on a plain
// port, after ALPN h2 on a TLS one): then H2Conn serves it from here on. True also while too
// few bytes have come to tell (the rest is awaited).
bool ClientConn::TryHttp2() {
  const H2Preface preface = SniffH2(*parser_config_, bev_.get());
  if (preface == H2Preface::kNo) return false;
  if (preface == H2Preface::kMaybe) return true;
  timer_.Cancel();
  state_ = State::kHttp2;
  h2_ = std::make_unique<H2Conn>(env_, bev_.get(), peer_ip_, tls_, [this](CloseReason reason) {
    // Ended by GOAWAY: linger as after an HTTP/1.1 answer, so the client reads the GOAWAY
    // rather than the reset its unread bytes (a flood's, say) would cause.
    if (reason == CloseReason::kAfterAnswer && !closed_) return BeginLinger();
    Close(reason);
  });
  h2_->Start();
  return true;
}

void ClientConn::CloseWhenIdle() {
  if (h2_) return h2_->Shutdown();
  if (state_ == State::kIdle) return Close(CloseReason::kShutdown);
  close_after_ = true;
}

void ClientConn::Close(CloseReason reason) {
  if (closed_) return;
  closed_ = true;
  if (h2_) h2_->DetachAll();
  if (exchange_) {
    exchange_->DetachClient();
    exchange_ = nullptr;
  }
  relay_.ClientGone();  // a relayed call is cut, and counted as closed by the client
  timer_.Cancel();
  if (resume_) event_del(resume_.get());
  if (sniff_) event_del(sniff_.get());
  reader_.Disable();
  if (bev_) bufferevent_disable(bev_.get(), EV_READ | EV_WRITE);
  env_->ConnectionClosed(this, reason);
}

void ClientConn::EnableRead(bool on) { EnableReading(reader_, bev_.get(), on); }

}  // namespace idemgate
