// SPDX-License-Identifier: Apache-2.0
// The HTTP/1.1 side of relaying a passthrough request: whether a request is relayed at all, and
// the connection as the relay's StreamSink, framing the answer as it arrives (chunk by chunk
// for an event stream) with back-pressure toward the upstream. The relay's own state machine is
// PassthroughRelay (passthrough_relay.h).
#include <sys/socket.h>

#include <cstdio>

#include "proxy/conn/client_conn.h"
#include "proxy/policy/guard.h"
#include "proxy/policy/routes.h"

namespace idemgate {

namespace {
constexpr char kLastChunk[] = "0\r\n\r\n";
constexpr char kContinue[] = "HTTP/1.1 100 Continue\r\n\r\n";

// An `Upgrade: websocket` request: refused, since the gateway does not tunnel.
bool AsksForWebSocket(const Request& request) {
  for (const Header& h : request.headers) {
    if (!HeaderNameEquals(h.name, "Upgrade")) continue;
    std::string_view rest = h.value;
    while (!rest.empty()) {
      size_t comma = rest.find(',');
      std::string_view token = TrimOws(rest.substr(0, comma));
      if (token.size() >= 9 && HeaderNameEquals(token.substr(0, 9), "websocket")) return true;
      if (comma == std::string_view::npos) break;
      rest.remove_prefix(comma + 1);
    }
  }
  return false;
}

}  // namespace

// The headers are in: a passthrough request (under its route's policy) is relayed, with no body
// limit of the gateway's own; any other is read whole, within its route's max_request_body, for
// its exchange. False when the request was answered here (refused, or its Content-Length is over
// the limit).
bool ClientConn::DecideBody() {
  const Request& head = parser_->request();
  if (AsksForWebSocket(head)) {
    RespondError(ErrorCode::kBadRequest,
                 "WebSocket (Upgrade: websocket) is not relayed by this gateway; it proxies "
                 "HTTP/1.1 requests only. Connect to the upstream directly for WebSocket.");
    return false;
  }
  std::shared_ptr<const Config> route = SelectRoute(parser_config_, head);
  if (route == nullptr) {
    RespondError(ErrorCode::kBadRequest, AmbiguousRouteDetail(head));
    return false;
  }
  if (!IsPassthroughRequest(*route, head)) {
    route_ = route;  // the exchange runs under it (StartExchange): selected once
    if (parser_->DecideBody(route->limits.max_request_body, nullptr)) return true;
    RespondError(ErrorCodeFor(parser_->error()), parser_->error_detail());
    return false;
  }
  parser_->DecideBody(0, [this](std::string_view piece) { relay_.RequestBody(piece); });
  StartRelay(*route);
  return true;
}

void ClientConn::StartRelay(const Config& config) {
  timer_.Cancel();  // from here the upstream call's timeouts apply
  state_ = State::kRelaying;
  Request& head = parser_->mutable_request();  // dropped with the parser's next request
  client_ip_ = BelievedClient(peer_ip_, config.listen.trusted, &head);
  relay_out_.clear();
  relay_framing_ = BodyFraming::kNone;
  write_low_set_ = false;
  relay_.Begin(head, config, tls_);
  close_after_ = !head.keep_alive || env_->draining();
  head_request_ = head.method == "HEAD";
  http10_ = head.http_minor == 0;
  if (head.expect_continue && !parser_->message_complete()) {
    continue_sent_ = true;
    bufferevent_write(bev_.get(), kContinue, sizeof(kContinue) - 1);
  }
}

void ClientConn::PauseRequestBody(bool paused) { EnableRead(!paused); }

void ClientConn::ReadRequestBody() {
  if (state_ == State::kRelaying) ProcessInput();
}

void ClientConn::SendHead(const StoredResponse& stored, int64_t length, std::string_view request_id,
                          bool request_complete) {
  const bool no_body = head_request_ || stored.status == 204 || stored.status == 304;
  BodyFraming framing = no_body       ? BodyFraming::kNone
                        : length >= 0 ? BodyFraming::kLength
                        : http10_     ? BodyFraming::kClose
                                      : BodyFraming::kChunked;
  // The connection cannot carry another request after a close-delimited body, nor after an
  // answer that came before the whole request was read.
  if (framing == BodyFraming::kClose || !request_complete || read_eof_ || env_->draining()) {
    close_after_ = true;
  }
  ConnectionHeader connection = close_after_ ? ConnectionHeader::kClose
                                : http10_    ? ConnectionHeader::kKeepAlive
                                             : ConnectionHeader::kNone;
  relay_head_.clear();
  AppendStreamedResponseHead(&relay_head_, stored, framing, length, connection, request_id);
  QueueOut(relay_head_);
  relay_framing_ = framing;
}

void ClientConn::SendBody(std::string_view piece) {
  if (relay_framing_ != BodyFraming::kChunked) return QueueOut(piece);
  if (piece.empty()) return;  // an empty chunk would end the body
  char size_line[24];
  int n = snprintf(size_line, sizeof(size_line), "%zx\r\n", piece.size());
  QueueOut(std::string_view(size_line, static_cast<size_t>(n)));
  QueueOut(piece);
  QueueOut("\r\n");
}

// While nothing waits in the output buffer, answer bytes gather in relay_out_ for one direct
// write (no EPOLLOUT round trip: a small answer leaves in one send); behind a slow client they
// go to the buffer, where the back-pressure check sees them.
void ClientConn::QueueOut(std::string_view bytes) {
  evbuffer* out = bufferevent_get_output(bev_.get());
  if (tls_ || evbuffer_get_length(out) > 0) {
    evbuffer_add(out, bytes.data(), bytes.size());
  } else {
    relay_out_.append(bytes);
    if (relay_out_.size() < kRelayLow) return;
    FlushOut();
  }
  PauseUpstreamIfBehind();
}

// The client reads slower than the upstream sends: stop reading the upstream until it caught up
// (OnRelayWritten, once the output is down to kRelayLow), so about kRelayHigh waits here at most.
void ClientConn::PauseUpstreamIfBehind() {
  if (relay_.response_paused() || !relay_.calling()) return;
  if (evbuffer_get_length(bufferevent_get_output(bev_.get())) <= kRelayHigh) return;
  if (!write_low_set_) {
    write_low_set_ = true;
    bufferevent_setwatermark(bev_.get(), EV_WRITE, kRelayLow, 0);
  }
  relay_.PauseResponse(true);
}

void ClientConn::FlushOut() {
  if (relay_out_.empty()) return;
  evbuffer* out = bufferevent_get_output(bev_.get());
  size_t sent = 0;
  if (evbuffer_get_length(out) == 0) {
    ssize_t n = send(bufferevent_getfd(bev_.get()), relay_out_.data(), relay_out_.size(),
                     MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) sent = static_cast<size_t>(n);
  }
  if (sent < relay_out_.size())
    evbuffer_add(out, relay_out_.data() + sent, relay_out_.size() - sent);
  relay_out_.clear();
}

void ClientConn::Flush() {
  FlushOut();
  PauseUpstreamIfBehind();
}

// The client's output went below kRelayLow (or empty, before the head).
void ClientConn::OnRelayWritten() { relay_.PauseResponse(false); }

// The answer's last byte is queued (`clean`) or the upstream failed in the middle of it: the
// connection goes on to the next request, or closes once what is queued is written.
void ClientConn::EndStream(bool clean, bool request_complete) {
  if (clean && relay_framing_ == BodyFraming::kChunked) QueueOut(kLastChunk);
  FlushOut();
  // The next answer on this connection reuses the buffer when it is small (a typical answer's
  // head and body: no allocation per request); a large one is given back while idle.
  for (std::string* kept : {&relay_out_, &relay_head_}) {
    if (kept->capacity() > kKeptOutBytes) {
      std::string().swap(*kept);
    } else {
      kept->clear();
    }
  }
  evbuffer* out = bufferevent_get_output(bev_.get());
  if (!clean || !request_complete) close_after_ = true;
  if (write_low_set_) bufferevent_setwatermark(bev_.get(), EV_WRITE, 0, 0);  // all written
  bool close = close_after_ || read_eof_ || env_->draining();
  state_ = close ? State::kClosing : State::kWriting;
  if (evbuffer_get_length(out) == 0) event_active(resume_.get(), 0, 0);
}

void ClientConn::SendError(std::shared_ptr<const StoredResponse> response, bool request_complete) {
  if (!request_complete) close_after_ = true;
  SendResponse(std::move(response), false, {});
}

// The client's request broke off mid-body (malformed chunking): the call is cut; the client
// gets the error if nothing of the answer went out yet, otherwise a cut connection.
void ClientConn::AbortRelay(ErrorCode code, const std::string& detail) {
  if (relay_.Abort(code, detail)) return Close(CloseReason::kSocketError);
  if (write_low_set_) bufferevent_setwatermark(bev_.get(), EV_WRITE, 0, 0);
  RespondError(code, detail);
}

}  // namespace idemgate
