// Connection pool to the origin: one UpstreamConn per TCP connection, reused while keep-alive.
#include "proxy/upstream/upstream.h"

#include <event2/bufferevent_ssl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <vector>

#include "proxy/http/http_parser.h"
#include "proxy/net/tls.h"

namespace idemgate {

namespace {
constexpr size_t kMaxIdle = 256;
}  // namespace

// One connection to the origin. Busy with at most one call at a time.
class UpstreamConn final : public StreamCall {
 public:
  explicit UpstreamConn(UpstreamPool* pool) : pool_(pool) {}

  // Starts connecting; the call begins once connected.
  bool Connect() {
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
    bufferevent_enable(bev_.get(), EV_READ | EV_WRITE);
    if (bufferevent_socket_connect(bev_.get(), pool_->addr(), static_cast<int>(pool_->addr_len())) <
        0) {
      return false;
    }
    evutil_socket_t fd = bufferevent_getfd(bev_.get());
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    return true;
  }

  // An idle pooled connection whose peer already closed, or that sat idle long enough for the
  // peer to be about to close it, is not reused: a POST sent into that race would come back as
  // an indeterminate upstream_failed the upstream never saw.
  // upstream.idle_timeout (`max_idle_ms`) stays below the peer's keep-alive so that race is
  // rare; gunicorn closes after 2 s, Node after 5 s, nginx after 75 s.
  bool Reusable(int64_t max_idle_ms) const {
    if (std::chrono::steady_clock::now() - idle_since_ >= std::chrono::milliseconds(max_idle_ms)) {
      return false;
    }
    char byte;
    ssize_t n = recv(bufferevent_getfd(bev_.get()), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
  }

  void MarkIdle() { idle_since_ = std::chrono::steady_clock::now(); }
  // Connected to the pool's current address (not to one its server's name no longer has).
  bool Current() const { return address_generation_ == pool_->address_generation(); }

  void Start(std::string request, bool head, const UpstreamLimits& limits, UpstreamCallback done,
             StreamReceiver* receiver = nullptr) {
    request_ = std::move(request);
    limits_ = limits;
    done_ = std::move(done);
    receiver_ = receiver;
    if (!parser_ || parser_max_ != limits.max_response_body) {
      parser_ = std::make_unique<ResponseParser>(limits.max_response_body);
      parser_max_ = limits.max_response_body;
    }
    late_rounds_ = 0;
    if (receiver_ != nullptr) {
      StartStream(head);
    } else {
      parser_->Begin(head);
    }
    timer_.Init<UpstreamConn, &UpstreamConn::OnTimeout>(pool_->base(), this);
    if (connecting_) {
      timer_.Arm(CappedMs(limits.connect_timeout_ms));
    } else {
      SendRequest();
    }
  }

  // StreamCall.
  void WriteBody(std::string_view prefix, std::string_view data,
                 std::string_view suffix) override {
    if (!done_) return;
    if (connecting_) {  // kept with the head: unsent if the connect fails (a group retries it)
      request_.append(prefix).append(data).append(suffix);
      return;
    }
    if (!bev_) return;
    Touch();
    std::string_view parts[3] = {prefix, data, suffix};
    size_t sent = 0;
    // Straight to the socket while nothing is queued, as SendRequest does.
    if (!connecting_ && pool_->tls() == nullptr &&
        evbuffer_get_length(bufferevent_get_output(bev_.get())) == 0) {
      iovec iov[3];
      for (int i = 0; i < 3; ++i) iov[i] = {const_cast<char*>(parts[i].data()), parts[i].size()};
      msghdr msg{};
      msg.msg_iov = iov;
      msg.msg_iovlen = 3;
      ssize_t n = sendmsg(bufferevent_getfd(bev_.get()), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) sent = static_cast<size_t>(n);
    }
    for (std::string_view part : parts) {
      size_t skip = std::min(sent, part.size());
      sent -= skip;
      if (skip < part.size()) bufferevent_write(bev_.get(), part.data() + skip, part.size() - skip);
    }
  }
  void EndBody() override { request_ended_ = true; }
  size_t Unsent() const override {
    return request_.size() + (bev_ ? evbuffer_get_length(bufferevent_get_output(bev_.get())) : 0);
  }
  void PauseResponse(bool paused) override {
    if (!done_ || !bev_ || paused == paused_) return;
    paused_ = paused;
    if (paused) {
      bufferevent_disable(bev_.get(), EV_READ);
      if (!connecting_) timer_.Cancel();
      return;
    }
    bufferevent_enable(bev_.get(), EV_READ);
    Touch();
    if (!connecting_) timer_.Arm(limits_.response_timeout_ms);
    StreamRead();  // what waited in the input buffer
    if (done_ && eof_pending_ && !paused_) OnEof();
  }
  void Cancel() override {
    done_ = nullptr;
    receiver_ = nullptr;
    timer_.Cancel();
    Die();
  }

  // Shutdown: the call in progress ends now (indeterminate once connected: R4).
  void Abort(const std::string& detail) {
    if (!done_) return;
    Fail(connecting_ ? UpstreamError::kUnavailable : UpstreamError::kFailed, detail);
  }

 private:
  static void ReadCb(bufferevent*, void* arg) { static_cast<UpstreamConn*>(arg)->OnRead(); }
  static void EventCb(bufferevent*, short what, void* arg) {
    static_cast<UpstreamConn*>(arg)->OnEvent(what);
  }
  static void WriteCb(bufferevent*, void* arg) {
    auto* self = static_cast<UpstreamConn*>(arg);
    if (self->done_ && self->receiver_) {
      self->Touch();
      self->receiver_->OnRequestDrained();
    }
  }
  // A streamed call's activity, which keeps its silence timer from firing (OnTimeout looks).
  void Touch() { last_activity_ = std::chrono::steady_clock::now(); }
  void SetCallbacks() { bufferevent_setcb(bev_.get(), ReadCb, nullptr, EventCb, this); }

  // A streamed call: its head (and the body written while connecting) goes once connected, the
  // response is parsed piece by piece, and the drained request body is reported.
  void StartStream(bool head) {
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

  // Back to a plain pooled connection after a streamed call.
  void EndStream() {
    receiver_ = nullptr;
    if (!bev_) return;
    SetCallbacks();
    if (paused_) bufferevent_enable(bev_.get(), EV_READ);
    paused_ = false;
  }

  // `ms`, or less when the call's deadline comes sooner.
  int64_t CappedMs(int64_t ms) const {
    if (limits_.deadline == std::chrono::steady_clock::time_point::max()) return ms;
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        limits_.deadline - std::chrono::steady_clock::now());
    return std::clamp<int64_t>(left.count(), 0, ms);
  }

  void SendRequest() {
    timer_.Arm(CappedMs(limits_.response_timeout_ms));
    // Straight to the socket when nothing is queued (no EPOLLOUT round trip); the rest, if the
    // socket took only part, goes through the bufferevent.
    size_t sent = 0;
    if (pool_->tls() == nullptr &&
        evbuffer_get_length(bufferevent_get_output(bev_.get())) == 0) {
      ssize_t n = send(bufferevent_getfd(bev_.get()), request_.data(), request_.size(),
                       MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) sent = static_cast<size_t>(n);
    }
    if (sent < request_.size()) {
      bufferevent_write(bev_.get(), request_.data() + sent, request_.size() - sent);
    }
    std::string().swap(request_);  // an idle pooled connection keeps no request buffer
  }

  void OnRead() {
    evbuffer* in = bufferevent_get_input(bev_.get());
    if (!done_) {  // bytes while idle: the peer broke protocol; drop the connection
      Die();
      return;
    }
    if (receiver_) return StreamRead();
    FeedParser(in, *parser_);
    Progress(evbuffer_get_length(in) > 0);
  }

  // A streamed response: the head once parsed, the body as it comes (the parser hands its pieces
  // to the receiver), until the receiver pauses reading or the response is complete.
  void StreamRead() {
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
        receiver_->OnResponseHead(parser_->TakeHead());
        if (!done_) return;
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

  // Acts on the parser's state after new bytes or EOF.
  void Progress(bool leftover) {
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

  void OnEvent(short what) {
    if (what & BEV_EVENT_CONNECTED) {
      connecting_ = false;
      timer_.Cancel();
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

  void OnEof() {
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

  // True for plain TCP, and for TLS when the peer sent close_notify.
  bool CleanTlsClose() const {
    if (pool_->tls() == nullptr) return true;
    SSL* ssl = bufferevent_openssl_get_ssl(bev_.get());
    return ssl != nullptr && (SSL_get_shutdown(ssl) & SSL_RECEIVED_SHUTDOWN) != 0;
  }

  // Why connecting failed: over https, the certificate check or the handshake's error when
  // there is one (the socket's errno says nothing then), else the socket's error.
  std::string ConnectFailure() {
    const int socket_error = EVUTIL_SOCKET_ERROR();
    if (pool_->tls() != nullptr) {
      std::string tls =
          DescribeTlsFailure(bufferevent_openssl_get_ssl(bev_.get()),
                             bufferevent_get_openssl_error(bev_.get()), pool_->host());
      if (!tls.empty()) return tls;
      if (TcpConnected()) return "TLS handshake failed: the upstream closed the connection";
    }
    return std::string("connect failed: ") + strerror(socket_error);
  }

  bool TcpConnected() const {
    sockaddr_storage peer{};
    socklen_t len = sizeof(peer);
    return getpeername(bufferevent_getfd(bev_.get()), reinterpret_cast<sockaddr*>(&peer), &len) ==
           0;
  }

  void OnTimeout() {
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

  // A streamed call fails on silence, not on length: the timer goes again for what is left of
  // the timeout since the last byte read or written (re-arming on every byte would cost an
  // event_add each). What waits unread (a paused process) is read first, as below.
  void OnStreamTimeout() {
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

  // Bytes (or the peer's FIN) wait in the socket, unread.
  bool InputWaiting() const {
    char byte;
    return recv(bufferevent_getfd(bev_.get()), &byte, 1, MSG_PEEK | MSG_DONTWAIT) >= 0;
  }

  // Enough loop turns to read a whole response of the largest size (libevent reads up to
  // 16 KiB a turn), and some.
  uint64_t MaxLateRounds() const { return limits_.max_response_body / (16 << 10) + 64; }

  void Fail(UpstreamError error, std::string detail) {
    UpstreamResult result;
    result.error = error;
    result.detail = std::move(detail);
    if (error == UpstreamError::kUnavailable) result.unsent_request = std::move(request_);
    Finish(std::move(result), false);
  }

  void Finish(UpstreamResult result, bool reusable) {
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

  void Die() {
    if (bev_) bufferevent_disable(bev_.get(), EV_READ | EV_WRITE);
    pool_->OnConnDead(this);
  }

  UpstreamPool* pool_;
  uint64_t address_generation_ = 0;
  BufferEventPtr bev_;
  std::unique_ptr<ResponseParser> parser_;
  uint64_t parser_max_ = 0;
  Timer timer_;
  std::string request_;
  bool connecting_ = false;
  bool eof_ = false;
  StreamReceiver* receiver_ = nullptr;  // a streamed call's (null otherwise)
  bool head_sent_ = false;              // streamed: the response head went to the receiver
  bool paused_ = false;                 // streamed: reading stopped for a slow client
  bool eof_pending_ = false;            // streamed: EOF came while paused
  bool request_ended_ = false;          // streamed: the request's body was all written
  uint64_t late_rounds_ = 0;  // timer turns spent reading what arrived by the timeout
  UpstreamLimits limits_;
  UpstreamCallback done_;
  std::chrono::steady_clock::time_point idle_since_;
  std::chrono::steady_clock::time_point last_activity_;  // streamed: the last byte in or out
};

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
    if (!conn->Connect()) use = UpstreamLimits{0, 0, 0};
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
  busy_.erase(it);
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
