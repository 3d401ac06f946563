// Relaying a passthrough request (one the gateway does not guard): its body goes upstream as it
// is read, and the answer comes back to the client as it arrives, chunk by chunk for an event
// stream. Nothing is stored, so nothing is buffered whole: each direction stops reading while
// the other side has more than kRelayHigh bytes queued, which bounds a connection's memory.
#include <sys/socket.h>

#include <chrono>
#include <cstdio>

#include "proxy/conn/client_conn.h"
#include "proxy/exchange/exchange.h"
#include "proxy/http/request_id.h"
#include "proxy/ops/access_log.h"
#include "proxy/policy/routes.h"
#include "proxy/worker.h"

namespace idemgate {

namespace {
// Queued bytes on the side being written above which the other side is no longer read, and
// below which it is read again.
constexpr size_t kRelayHigh = 256 << 10;
constexpr size_t kRelayLow = 64 << 10;
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

ErrorCode ErrorFor(UpstreamError error) {
  switch (error) {
    case UpstreamError::kUnavailable:
      return ErrorCode::kUpstreamUnavailable;
    case UpstreamError::kTimeout:
      return ErrorCode::kUpstreamTimeout;
    default:
      return ErrorCode::kUpstreamFailed;
  }
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
  parser_->DecideBody(0, [this](std::string_view piece) { RelayRequestBody(piece); });
  StartRelay(*route);
  return true;
}

void ClientConn::StartRelay(const Config& config) {
  timer_.Cancel();  // from here the upstream call's timeouts apply
  state_ = State::kRelaying;
  Request& head = parser_->mutable_request();  // dropped with the parser's next request
  relay_ = Relay{};
  relay_.started_us = worker_->MonoUs();
  relay_.chunked_up = head.chunked;
  relay_.request_id = AssignRequestId(&head);
  relay_.method = head.method;
  relay_.path = std::string(head.Path());
  close_after_ = !head.keep_alive || worker_->draining();
  head_request_ = head.method == "HEAD";
  http10_ = head.http_minor == 0;
  relay_.limits.connect_timeout_ms = config.upstream.connect_timeout_ms;
  relay_.limits.response_timeout_ms = config.upstream.response_timeout_ms;
  relay_.limits.max_response_body = UINT64_MAX;  // relayed, not stored: no cap of its own
  relay_.limits.idle_timeout_ms = config.upstream.idle_timeout_ms;
  relay_.limits.group = config.upstream_group;  // a route's group ("" = [upstream])
  relay_.up = SerializeUpstreamRequestHead(head, peer_ip_, tls_ ? "https" : "http",
                                           UpstreamHost(config.upstream), config.upstream.host);
  if (head.expect_continue && !parser_->message_complete()) {
    continue_sent_ = true;
    bufferevent_write(bev_.get(), kContinue, sizeof(kContinue) - 1);
  }
}

// The head and what came of the body with it go in one write (a small request: all of it).
void ClientConn::StartRelayCall() {
  relay_.call_started = true;
  UpstreamGroup* group = worker_->Group(relay_.limits.group);
  if (group == nullptr) return OnRelayDone(Worker::MissingGroup(relay_.limits.group));
  relay_.call = group->SendStream(
      std::move(relay_.up), head_request_, relay_.limits, this,
      [this](UpstreamResult result) { OnRelayDone(std::move(result)); });
  std::string().swap(relay_.up);
  if (relay_.request_done) relay_.call->EndBody();
  CheckUpstreamBacklog();
}

void ClientConn::RelayRequestBody(std::string_view piece) {
  if (relay_.call_started && relay_.call == nullptr) return;  // answered: the rest is dropped
  if (relay_.chunked_up && piece.empty()) return;  // an empty chunk would end the body
  char size_line[24];
  std::string_view prefix, suffix;
  if (relay_.chunked_up) {
    int n = snprintf(size_line, sizeof(size_line), "%zx\r\n", piece.size());
    prefix = std::string_view(size_line, static_cast<size_t>(n));
    suffix = "\r\n";
  }
  if (relay_.call_started) return relay_.call->WriteBody(prefix, piece, suffix);
  relay_.up.append(prefix).append(piece).append(suffix);
}

void ClientConn::RelayRequestEnd() {
  relay_.request_done = true;
  if (!relay_.call_started) {
    if (relay_.chunked_up) relay_.up.append(kLastChunk, 5);
  } else if (relay_.call != nullptr) {
    if (relay_.chunked_up) relay_.call->WriteBody({}, kLastChunk);
    relay_.call->EndBody();
  }
  // Ready for the next request; its bytes wait in the input buffer until this answer is out.
  parser_->TakeRequest();
  if (relay_.client_paused) {
    relay_.client_paused = false;
    bufferevent_enable(bev_.get(), EV_READ);
  }
}

// The upstream takes the body slower than the client sends it: stop reading the client.
void ClientConn::CheckUpstreamBacklog() {
  if (relay_.call == nullptr || relay_.client_paused) return;
  if (relay_.call->Unsent() <= kRelayHigh) return;
  relay_.client_paused = true;
  bufferevent_disable(bev_.get(), EV_READ);
}

void ClientConn::OnRequestDrained() {
  if (!relay_.client_paused || state_ != State::kRelaying) return;
  relay_.client_paused = false;
  bufferevent_enable(bev_.get(), EV_READ);
  ProcessInput();
}

void ClientConn::OnResponseHead(Response head) {
  relay_.upstream_status = head.status;
  relay_.status = head.status;
  StoredResponse stored = ToStoredResponse(head, head_request_, AnswerUse::kRelayed);
  const bool no_body = head_request_ || head.status == 204 || head.status == 304;
  BodyFraming framing = no_body                                       ? BodyFraming::kNone
                        : (head.content_length >= 0 && !head.chunked) ? BodyFraming::kLength
                        : http10_                                     ? BodyFraming::kClose
                                                                      : BodyFraming::kChunked;
  // The connection cannot carry another request after a close-delimited body, nor after an
  // answer that came before the whole request was read.
  if (framing == BodyFraming::kClose || !relay_.request_done || read_eof_ || worker_->draining()) {
    close_after_ = true;
  }
  ConnectionHeader connection = close_after_ ? ConnectionHeader::kClose
                                : http10_    ? ConnectionHeader::kKeepAlive
                                             : ConnectionHeader::kNone;
  QueueOut(SerializeStreamedResponseHead(stored, framing, head.content_length, connection,
                                         relay_.request_id));
  relay_.framing = framing;
  relay_.head_sent = true;
}

void ClientConn::OnResponseBody(std::string_view piece) {
  relay_.bytes_out += piece.size();
  if (relay_.framing != BodyFraming::kChunked) return QueueOut(piece);
  if (piece.empty()) return;  // an empty chunk would end the body
  char size_line[24];
  int n = snprintf(size_line, sizeof(size_line), "%zx\r\n", piece.size());
  QueueOut(std::string_view(size_line, static_cast<size_t>(n)));
  QueueOut(piece);
  QueueOut("\r\n");
}

// While nothing waits in the output buffer, answer bytes gather in relay_.out for one direct
// write (no EPOLLOUT round trip: a small answer leaves in one send); behind a slow client they
// go to the buffer, where the back-pressure check sees them.
void ClientConn::QueueOut(std::string_view bytes) {
  evbuffer* out = bufferevent_get_output(bev_.get());
  if (tls_ || evbuffer_get_length(out) > 0) {
    evbuffer_add(out, bytes.data(), bytes.size());
  } else {
    relay_.out.append(bytes);
    if (relay_.out.size() < kRelayLow) return;
    FlushOut();
  }
  PauseUpstreamIfBehind();
}

// The client reads slower than the upstream sends: stop reading the upstream until it caught up
// (OnRelayWritten, once the output is down to kRelayLow), so about kRelayHigh waits here at most.
void ClientConn::PauseUpstreamIfBehind() {
  if (relay_.upstream_paused || relay_.call == nullptr) return;
  if (evbuffer_get_length(bufferevent_get_output(bev_.get())) <= kRelayHigh) return;
  relay_.upstream_paused = true;
  if (!relay_.write_low_set) {
    relay_.write_low_set = true;
    bufferevent_setwatermark(bev_.get(), EV_WRITE, kRelayLow, 0);
  }
  relay_.call->PauseResponse(true);
}

void ClientConn::FlushOut() {
  if (relay_.out.empty()) return;
  evbuffer* out = bufferevent_get_output(bev_.get());
  size_t sent = 0;
  if (evbuffer_get_length(out) == 0) {
    ssize_t n = send(bufferevent_getfd(bev_.get()), relay_.out.data(), relay_.out.size(),
                     MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) sent = static_cast<size_t>(n);
  }
  if (sent < relay_.out.size())
    evbuffer_add(out, relay_.out.data() + sent, relay_.out.size() - sent);
  relay_.out.clear();
}

void ClientConn::OnResponseFlush() {
  FlushOut();
  PauseUpstreamIfBehind();
}

// The client's output went below kRelayLow (or empty, before the head).
void ClientConn::OnRelayWritten() {
  if (!relay_.upstream_paused || relay_.call == nullptr) return;
  relay_.upstream_paused = false;
  relay_.call->PauseResponse(false);
}

void ClientConn::OnRelayDone(UpstreamResult result) {
  relay_.call = nullptr;
  if (relay_.client_paused) {  // nothing more goes upstream; the rest is read and dropped
    relay_.client_paused = false;
    bufferevent_enable(bev_.get(), EV_READ);
  }
  relay_.upstream_us = worker_->MonoUs() - relay_.started_us;
  relay_.upstream_error = result.error;
  if (result.error == UpstreamError::kNone) return FinishRelay(true);
  relay_.error_detail = result.detail;
  if (relay_.head_sent) return FinishRelay(false);  // cut: the client sees a truncated body
  // Nothing of the answer went out: the gateway's error answer, as on the buffered path.
  ErrorCode code = ErrorFor(result.error);
  relay_.error = code;
  if (!relay_.request_done) close_after_ = true;
  StoredResponse response = MakeErrorResponse(code);
  relay_.status = response.status;
  relay_.bytes_out = response.body.size();
  RecordRelay(false);
  SendResponse(std::make_shared<const StoredResponse>(std::move(response)), false, {});
}

// The answer's last byte is queued (`clean`) or the upstream failed in the middle of it: the
// connection goes on to the next request, or closes once what is queued is written.
void ClientConn::FinishRelay(bool clean) {
  if (clean && relay_.framing == BodyFraming::kChunked) QueueOut(kLastChunk);
  FlushOut();
  std::string().swap(relay_.out);  // an idle connection keeps no buffer
  evbuffer* out = bufferevent_get_output(bev_.get());
  if (!clean || !relay_.request_done) close_after_ = true;
  RecordRelay(false);
  if (relay_.write_low_set) bufferevent_setwatermark(bev_.get(), EV_WRITE, 0, 0);  // all written
  bool close = close_after_ || read_eof_ || worker_->draining();
  state_ = close ? State::kClosing : State::kWriting;
  if (evbuffer_get_length(out) == 0) event_active(resume_.get(), 0, 0);
}

// The client's request broke off mid-body (malformed chunking): the call is cut; the client
// gets the error if nothing of the answer went out yet, otherwise a cut connection.
void ClientConn::AbortRelay(ErrorCode code, const std::string& detail) {
  if (relay_.call != nullptr) {
    relay_.call->Cancel();
    relay_.call = nullptr;
  }
  relay_.error = code;
  relay_.error_detail = detail;
  relay_.upstream_error = UpstreamError::kFailed;
  relay_.upstream_us = worker_->MonoUs() - relay_.started_us;
  if (relay_.head_sent) {
    RecordRelay(false);
    return Close(CloseReason::kSocketError);
  }
  relay_.recorded = true;  // RespondError counts and logs it
  if (relay_.write_low_set) bufferevent_setwatermark(bev_.get(), EV_WRITE, 0, 0);
  RespondError(code, detail);
}

void ClientConn::RecordRelay(bool client_closed) {
  if (relay_.recorded) return;
  relay_.recorded = true;
  ExchangeSample sample;
  sample.outcome = Outcome::kPassthrough;
  sample.error = relay_.error;
  sample.upstream_status = relay_.upstream_status;
  sample.upstream_error = relay_.upstream_error;
  sample.total_us = worker_->MonoUs() - relay_.started_us;
  sample.upstream_us = relay_.upstream_us;
  if (!worker_->WantsAccessEntry()) return worker_->RecordExchange(sample, nullptr);
  AccessEntry entry;
  entry.time = std::chrono::system_clock::now();
  entry.method = relay_.method;
  entry.path = relay_.path;
  entry.client_ip = peer_ip_;
  entry.request_id = relay_.request_id;
  entry.status = relay_.status;
  entry.outcome = OutcomeName(Outcome::kPassthrough);
  entry.error = relay_.error;
  entry.error_detail = relay_.error_detail;
  entry.total_us = sample.total_us;
  entry.upstream_us = relay_.upstream_us;
  entry.bytes_out = relay_.bytes_out;
  entry.client_closed = client_closed;
  worker_->RecordExchange(sample, &entry);
}

}  // namespace idemgate
