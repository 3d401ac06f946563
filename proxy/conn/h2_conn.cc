// SPDX-License-Identifier: Apache-2.0
// H2Conn: the client connection's HTTP/2 mode. Streams become exchanges, answers go out on
// their streams, and the session's output is pulled only while the socket keeps up.
#include "proxy/conn/h2_conn.h"

#include <event2/buffer.h>

#include <algorithm>
#include <utility>

#include "proxy/conn/h2_relay.h"
#include "proxy/exchange/exchange.h"
#include "proxy/policy/forwarded.h"
#include "proxy/policy/guard.h"
#include "proxy/policy/routes.h"

namespace idemgate {
namespace {

// Session output is pulled while the socket's buffer holds less than this; the write callback
// comes when it is down to the low mark (a few frames' worth in flight, no more).
constexpr size_t kWriteHigh = 64 << 10;
constexpr size_t kWriteLow = 16 << 10;

H2Limits LimitsFrom(const Config& config) {
  H2Limits limits;
  limits.max_streams = static_cast<uint32_t>(config.limits.http2_max_streams);
  limits.max_header_bytes = config.limits.max_header_bytes;
  return limits;
}

}  // namespace

H2Preface SniffH2(const Config& config, bufferevent* bev) {
  if (!config.listen.http2) return H2Preface::kNo;
  char buf[24];
  evbuffer* in = bufferevent_get_input(bev);
  const size_t n = std::min(sizeof(buf), evbuffer_get_length(in));
  if (evbuffer_copyout(in, buf, n) < 0) return H2Preface::kNo;
  return MatchH2Preface(std::string_view(buf, n));
}

// One stream: the sink its exchange answers through.
struct H2Conn::Stream final : ResponseSink {
  Stream(H2Conn* c, int32_t i) : conn(c), id(i) {}
  void SendResponse(std::shared_ptr<const StoredResponse> response, bool replayed,
                    std::string_view extra_headers) override {
    conn->Answer(this, std::move(response), replayed, extra_headers);
  }
  H2Conn* conn;
  int32_t id;
  std::shared_ptr<const Config> route;  // selected from the head
  Exchange* exchange = nullptr;         // until it answers (or the stream goes)
  std::unique_ptr<H2Relay> relay;       // a passthrough request, relayed instead
  bool head_request = false;
  bool request_done = false;
  bool answered = false;
};

H2Conn::H2Conn(ClientEnv* env, bufferevent* bev, std::string peer_ip, bool tls,
               std::function<void(CloseReason)> close)
    : env_(env),
      bev_(bev),
      peer_ip_(std::move(peer_ip)),
      tls_(tls),
      close_(std::move(close)),
      config_(env->Snapshot()),
      session_(this, LimitsFrom(*config_)) {
  idle_timer_.Init<H2Conn, &H2Conn::OnIdleTimer>(env->base(), this);
  request_timer_.Init<H2Conn, &H2Conn::OnRequestTimer>(env->base(), this);
  flush_soon_.reset(
      event_new(env->base(), -1, 0, &EventTrampoline<H2Conn, &H2Conn::Flush>, this));
}

H2Conn::~H2Conn() { DetachAll(); }

void H2Conn::Start() {
  bufferevent_setwatermark(bev_, EV_WRITE, kWriteLow, 0);
  idle_timer_.Arm(config_->limits.idle_timeout_ms);
  if (env_->draining()) session_.StartGracefulShutdown();
  OnRead();
}

void H2Conn::OnRead() {
  retired_.clear();
  if (closed_) return;
  evbuffer* in = bufferevent_get_input(bev_);
  while (evbuffer_get_length(in) > 0) {
    const size_t len = evbuffer_get_contiguous_space(in);
    const char* data = reinterpret_cast<const char*>(evbuffer_pullup(in, len));
    in_session_ = true;
    const bool more = session_.Receive(std::string_view(data, len));
    in_session_ = false;
    evbuffer_drain(in, len);
    StartRelays();
    if (closed_) return;
    if (!more) {
      evbuffer_drain(in, evbuffer_get_length(in));  // the connection is over: input is ignored
      break;
    }
  }
  Flush();
}

// The relays whose heads came in the bytes just handed to the session: their calls start now,
// each with the body that came along (one write upstream, not a head and then each DATA).
void H2Conn::StartRelays() {
  std::vector<int32_t> ids = std::move(starting_);
  starting_.clear();
  for (int32_t id : ids) {
    auto it = streams_.find(id);
    if (it != streams_.end() && it->second->relay) it->second->relay->StartCall();
  }
}

void H2Conn::OnWritten() {
  retired_.clear();
  Flush();
}

void H2Conn::Shutdown() {
  if (closed_) return;
  session_.StartGracefulShutdown();
  Flush();
}

void H2Conn::DetachAll() {
  if (closed_) return;
  closed_ = true;
  idle_timer_.Cancel();
  request_timer_.Cancel();
  for (auto& [id, stream] : streams_) {
    if (stream->relay) stream->relay->OnStreamGone(true);
    if (stream->exchange == nullptr) continue;
    stream->exchange->ClientClosed();
    stream->exchange->DetachClient();  // it runs on and stores its result; a retry replays
    stream->exchange = nullptr;
  }
  // Freed with the connection: one of them may be what called in here.
  for (auto& [id, stream] : streams_) retired_.push_back(std::move(stream));
  streams_.clear();
}

H2BodyPlan H2Conn::OnRequestHead(int32_t id, Request& head, bool end_stream) {
  idle_timer_.Cancel();
  auto stream = std::make_unique<Stream>(this, id);
  // The limits in force when the request begins, as over HTTP/1.1 (a reload may have come).
  stream->route = SelectRoute(env_->Snapshot(), head);
  stream->head_request = head.method == "HEAD";
  H2BodyPlan plan;
  plan.mode = H2BodyPlan::Mode::kBuffer;
  if (stream->route == nullptr) {  // the readings of its path select different routes
    stream->answered = true;
    SubmitError(id, ErrorCode::kBadRequest, AmbiguousRouteDetail(head));
    plan.max_body = 1;  // its body is not wanted
    streams_[id] = std::move(stream);
    return plan;
  }
  plan.max_body = stream->route->limits.max_request_body;
  if (IsPassthroughRequest(*stream->route, head)) {
    // Relayed as it comes, acknowledged as the upstream takes it; no body limit of its own.
    plan.mode = H2BodyPlan::Mode::kStream;
    stream->request_done = true;  // from here the upstream call's timeouts apply
    stream->answered = true;      // the relay answers
    Request relayed = std::move(head);  // the session needs no more of a streamed head
    std::string client = BelievedClient(peer_ip_, stream->route->listen.trusted, &relayed);
    stream->relay = std::make_unique<H2Relay>(
        env_, &session_,
        [this] { FlushSoon(); },
        id, std::move(client), tls_);
    H2Relay* relay = stream->relay.get();
    streams_[id] = std::move(stream);
    relay->Start(std::move(relayed), end_stream, *streams_[id]->route);
    starting_.push_back(id);
    return plan;
  }
  deadlines_.emplace_back(env_->MonoUs() / 1000 + config_->limits.client_timeout_ms, id);
  if (!request_timer_.armed()) ArmRequestTimer();
  streams_[id] = std::move(stream);
  return plan;
}

void H2Conn::OnRequest(int32_t id, Request request) {
  auto it = streams_.find(id);
  if (it == streams_.end() || closed_) return;
  Stream* s = it->second.get();
  s->request_done = true;
  if (s->answered) return;  // refused at its head
  const std::string client = BelievedClient(peer_ip_, s->route->listen.trusted, &request);
  s->exchange = env_->NewExchange(s, s->route, std::move(request), client, tls_);
  s->exchange->Start();  // may answer at once (Stream::SendResponse)
}

void H2Conn::OnRequestBody(int32_t id, std::string_view piece) {
  auto it = streams_.find(id);
  if (it == streams_.end() || !it->second->relay) return session_.Consume(id, piece.size());
  it->second->relay->OnBody(piece);
}

void H2Conn::OnRequestEnd(int32_t id) {
  auto it = streams_.find(id);
  if (it != streams_.end() && it->second->relay) it->second->relay->OnEnd();
}

void H2Conn::OnResponseDrained(int32_t id) {
  auto it = streams_.find(id);
  if (it != streams_.end() && it->second->relay) it->second->relay->OnDrained();
}

void H2Conn::OnRequestRejected(int32_t id, ErrorCode code, const std::string& detail) {
  auto it = streams_.find(id);
  if (it != streams_.end()) {
    if (it->second->answered) return;  // refused already
    it->second->answered = true;
  }
  SubmitError(id, code, detail);
  if (!in_session_) Flush();
}

// The gateway's own answer on a stream that has no exchange (refused, or too slow to arrive).
void H2Conn::SubmitError(int32_t id, ErrorCode code, const std::string& detail) {
  auto error = std::make_shared<const StoredResponse>(MakeErrorResponse(code, detail));
  env_->RecordConnectionError(code, Protocol::kHttp2, peer_ip_, error->body.size());
  bool send_body = false;
  H2Fields fields = H2AnswerFields(*error, false, {}, false, {}, &send_body);
  session_.SubmitResponse(id, std::move(fields), error, send_body);
}

void H2Conn::OnStreamClosed(int32_t id, H2StreamEnd how, uint32_t) {
  auto it = streams_.find(id);
  if (it == streams_.end()) return;
  std::unique_ptr<Stream> s = std::move(it->second);
  streams_.erase(it);
  if (s->relay) s->relay->OnStreamGone(how == H2StreamEnd::kReset);
  if (s->exchange != nullptr) {
    // H4: reset before its answer: detached like a closed connection (its result is stored).
    if (how == H2StreamEnd::kReset) s->exchange->ClientClosed();
    s->exchange->DetachClient();
    s->exchange = nullptr;
  }
  // Freed once the loop is back here: its sink or relay may be what called into the session.
  retired_.push_back(std::move(s));
  if (streams_.empty() && !closed_) idle_timer_.Arm(config_->limits.idle_timeout_ms);
}

void H2Conn::Answer(Stream* s, std::shared_ptr<const StoredResponse> response, bool replayed,
                    std::string_view extra_headers) {
  // This request's X-Request-Id goes back with its answer (a replay's too: not the stored one).
  const std::string request_id = s->exchange != nullptr ? s->exchange->request_id() : "";
  s->exchange = nullptr;
  if (closed_ || s->answered) return;
  s->answered = true;
  bool send_body = false;
  H2Fields fields =
      H2AnswerFields(*response, replayed, extra_headers, s->head_request, request_id, &send_body);
  session_.SubmitResponse(s->id, std::move(fields), std::move(response), send_body);
  FlushSoon();
}

// Answers that come from upstream reads and store callbacks go out together, once the loop has
// run the other events ready with them: one TLS record and one write for the answers of one
// round, not one each (an active event runs after those already queued).
void H2Conn::FlushSoon() {
  if (in_session_ || closed_) return;  // inside Receive: OnRead flushes after it
  if (flush_soon_) event_active(flush_soon_.get(), EV_TIMEOUT, 0);
}

void H2Conn::Flush() {
  // A relay that resumes inside PullOutput (OnResponseDrained) flushes again: this loop, already
  // running, takes what it queued.
  if (closed_ || flushing_) return;
  evbuffer* out = bufferevent_get_output(bev_);
  flushing_ = true;
  // Frames are gathered and handed to the socket's buffer once: over TLS each add to it is an
  // SSL_write (a record and a write(2) of its own), and an answer is two or three frames. The
  // gathering buffer is the thread's, kept between flushes (taken, so a nested use gets its own).
  thread_local std::string spare;
  std::string staged = std::move(spare);
  staged.clear();
  const size_t queued = evbuffer_get_length(out);
  while (queued + staged.size() < kWriteHigh) {
    const std::string_view piece = session_.PullOutput();
    if (piece.empty()) break;
    staged.append(piece);
  }
  if (!staged.empty()) evbuffer_add(out, staged.data(), staged.size());
  spare = std::move(staged);
  flushing_ = false;
  if (closed_) return;
  if (!session_.Finished()) return;
  // Finished with output still wanted: a client flooding without reading; no point waiting.
  if (session_.WantsWrite()) return CloseNow(CloseReason::kSocketError);
  if (evbuffer_get_length(out) == 0) {
    CloseNow(env_->draining() ? CloseReason::kShutdown : CloseReason::kAfterAnswer);
  }
  // Otherwise the write callback comes back here once the GOAWAY is out.
}

void H2Conn::OnIdleTimer() {
  retired_.clear();
  if (closed_ || !streams_.empty()) return;
  session_.Terminate(0, "idle");  // GOAWAY(NO_ERROR); closed once it is out
  Flush();
}

// limits.client_timeout for each stream's request, from its head: 408, as over HTTP/1.1.
void H2Conn::OnRequestTimer() {
  const int64_t now_ms = env_->MonoUs() / 1000;
  while (!deadlines_.empty() && deadlines_.front().first <= now_ms) {
    const int32_t id = deadlines_.front().second;
    deadlines_.pop_front();
    auto it = streams_.find(id);
    if (it == streams_.end() || it->second->request_done || it->second->answered) continue;
    it->second->answered = true;
    SubmitError(id, ErrorCode::kRequestTimeout, "");
  }
  ArmRequestTimer();
  Flush();
}

void H2Conn::ArmRequestTimer() {
  if (deadlines_.empty() || closed_) return;
  const int64_t now_ms = env_->MonoUs() / 1000;
  request_timer_.Arm(std::max<int64_t>(deadlines_.front().first - now_ms, 0));
}

void H2Conn::CloseNow(CloseReason reason) {
  if (closed_) return;
  DetachAll();
  close_(reason);
}

}  // namespace idemgate
