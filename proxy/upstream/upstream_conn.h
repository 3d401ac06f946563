// SPDX-License-Identifier: Apache-2.0
// One connection to the origin (the pool's, upstream.h): connect, send one call's request,
// parse or stream its response, enforce its timeouts, and go back to the pool when reusable.
// Internal to upstream/.
#pragma once

#include <event2/bufferevent.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "proxy/http/http_parser.h"
#include "proxy/net/event_util.h"
#include "proxy/net/socket_reader.h"
#include "proxy/upstream/upstream.h"

namespace idemgate {

// One connection to the origin. Busy with at most one call at a time.
class UpstreamConn final : public StreamCall {
 public:
  explicit UpstreamConn(UpstreamPool* pool) : pool_(pool) {}

  // Starts connecting; the call begins once connected.
  bool Connect();

  // An idle pooled connection whose peer already closed, or that sat idle long enough for the
  // peer to be about to close it, is not reused: a POST sent into that race would come back as
  // an indeterminate upstream_failed the upstream never saw.
  // upstream.idle_timeout (`max_idle_ms`) stays below the peer's keep-alive so that race is
  // rare; gunicorn closes after 2 s, Node after 5 s, nginx after 75 s.
  bool Reusable(int64_t max_idle_ms) const;

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
    // One timer for the connection's life: every call arms it below or in SendRequest.
    if (!timer_.initialized()) {
      timer_.Init<UpstreamConn, &UpstreamConn::OnTimeout>(pool_->base(), this);
    }
    if (connecting_) {
      timer_.Arm(CappedMs(limits.connect_timeout_ms));
    } else {
      SendRequest();
    }
  }

  // StreamCall.
  void WriteBody(std::string_view prefix, std::string_view data, std::string_view suffix) override {
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
  size_t Unsent() const override;
  void PauseResponse(bool paused) override;
  void Cancel() override;

  // Shutdown: the call in progress ends now (indeterminate once connected: R4).
  void Abort(const std::string& detail);

 private:
  static void ReadCb(bufferevent*, void* arg) { static_cast<UpstreamConn*>(arg)->OnRead(); }
  static void EventCb(bufferevent*, short what, void* arg);
  static void WriteCb(bufferevent*, void* arg);
  // A streamed call's activity, which keeps its silence timer from firing (OnTimeout looks).
  void Touch() { last_activity_ = std::chrono::steady_clock::now(); }
  void SetCallbacks() { bufferevent_setcb(bev_.get(), ReadCb, nullptr, EventCb, this); }

  // A streamed call: its head (and the body written while connecting) goes once connected, the
  // response is parsed piece by piece, and the drained request body is reported.
  void StartStream(bool head);

  // Back to a plain pooled connection after a streamed call.
  void EndStream();

  // `ms`, or less when the call's deadline comes sooner.
  int64_t CappedMs(int64_t ms) const;

  void SendRequest();

  void OnRead();

  // A streamed response: the head once parsed, the body as it comes (the parser hands its pieces
  // to the receiver), until the receiver pauses reading or the response is complete.
  void StreamRead();

  // Acts on the parser's state after new bytes or EOF.
  void Progress(bool leftover);

  void OnEvent(short what);

  void OnEof();

  // True for plain TCP, and for TLS when the peer sent close_notify.
  bool CleanTlsClose() const;

  // Why connecting failed: over https, the certificate check or the handshake's error when
  // there is one (the socket's errno says nothing then), else the socket's error.
  std::string ConnectFailure();

  bool TcpConnected() const;

  void OnTimeout();

  // A streamed call fails on silence, not on length: the timer goes again for what is left of
  // the timeout since the last byte read or written (re-arming on every byte would cost an
  // event_add each). What waits unread (a paused process) is read first, as below.
  void OnStreamTimeout();

  // Bytes (or the peer's FIN) wait in the socket, unread.
  bool InputWaiting() const;

  // Enough loop turns to read a whole response of the largest size (libevent reads up to
  // 16 KiB a turn), and some.
  uint64_t MaxLateRounds() const { return limits_.max_response_body / (16 << 10) + 64; }

  void Fail(UpstreamError error, std::string detail);

  void Finish(UpstreamResult&& result, bool reusable);

  void Die();

  // Reading the upstream on or off: the plain socket's reader, or the TLS bufferevent's.
  void EnableRead(bool on);

  UpstreamPool* pool_;
  uint64_t address_generation_ = 0;
  BufferEventPtr bev_;
  SocketReader reader_;  // plain TCP, once connected: reads bev_'s socket (after bev_: it goes first)
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
  uint64_t late_rounds_ = 0;            // timer turns spent reading what arrived by the timeout
  UpstreamLimits limits_;
  UpstreamCallback done_;
  std::chrono::steady_clock::time_point idle_since_;
  std::chrono::steady_clock::time_point last_activity_;  // streamed: the last byte in or out
};

}  // namespace idemgate
