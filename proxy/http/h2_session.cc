// SPDX-License-Identifier: Apache-2.0
// H2Session: nghttp2's server session driven by memory (mem_recv / mem_send), its callbacks
// turned into stream events, and the flood and bomb limits nghttp2 does not count itself.
#include "proxy/http/h2_session.h"

#include <nghttp2/nghttp2.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <unordered_map>
#include <utility>
#include <vector>

namespace idemgate {
namespace {

constexpr std::string_view kPreface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
// A streamed answer's queued bytes at or below this after a send: OnResponseDrained.
constexpr size_t kDrainedBytes = 16 << 10;

int64_t SteadyNowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// A token bucket: `burst` events at once, refilled at `rate` per second.
class RateLimit {
 public:
  RateLimit(uint64_t burst, uint64_t rate, int64_t now_ms)
      : burst_milli_(burst * 1000), rate_(rate), tokens_milli_(burst * 1000), last_ms_(now_ms) {}
  // False when the event is over the limit.
  bool Take(int64_t now_ms) {
    if (now_ms > last_ms_) {
      const uint64_t refill = static_cast<uint64_t>(now_ms - last_ms_) * rate_;
      tokens_milli_ = std::min(burst_milli_, tokens_milli_ + refill);
      last_ms_ = now_ms;
    }
    if (tokens_milli_ < 1000) return false;
    tokens_milli_ -= 1000;
    return true;
  }

 private:
  uint64_t burst_milli_;
  uint64_t rate_;
  uint64_t tokens_milli_;
  int64_t last_ms_;
};

}  // namespace

struct H2Session::Impl {
  struct Stream {
    explicit Stream(int32_t stream_id, const H2Limits& limits)
        : id(stream_id),
          builder(limits.max_header_bytes,
                  limits.max_header_bytes * std::max<uint32_t>(limits.header_bomb_factor, 1)) {}
    int32_t id;
    H2RequestBuilder builder;
    Request request;
    H2BodyPlan plan;
    bool head_done = false;  // OnRequestHead was called (or the request was refused)
    bool rejected = false;   // refused with the gateway's answer: its body is discarded
    bool request_done = false;
    size_t unconsumed = 0;   // kStream: delivered, not yet acknowledged by Consume
    bool answering = false;  // an answer was submitted
    bool answered = false;   // its END_STREAM went out
    // The answer's body: a whole one read from `whole`, or a streamed one queued in `out`.
    std::shared_ptr<const StoredResponse> whole;
    size_t whole_sent = 0;
    std::string out;
    size_t out_sent = 0;
    bool out_end = false;
    bool deferred = false;  // the data source said "nothing now": resume on more
  };

  Impl(H2SessionHandler* h, H2Limits l)
      : handler(h),
        limits(std::move(l)),
        clock(limits.now_ms ? limits.now_ms : SteadyNowMs),
        control(limits.control_burst, limits.control_rate, clock()),
        resets(limits.reset_burst, limits.reset_rate, clock()) {}

  H2SessionHandler* handler;
  H2Limits limits;
  std::function<int64_t()> clock;
  RateLimit control;
  RateLimit resets;  // RST_STREAM from the client (rapid reset)
  nghttp2_session* session = nullptr;
  std::unordered_map<int32_t, std::unique_ptr<Stream>> streams;
  std::vector<int32_t> drained;  // streams whose queued answer fell low in this send
  uint32_t fail_code = 0;        // set by a callback that ends the connection
  std::string reason;
  bool failed = false;   // a connection error: nothing more is read
  bool flooded = false;  // the client floods without reading: no point flushing
  uint32_t goaway_code = 0;
  size_t continuations = 0;  // fallback CONTINUATION count for the header block being read

  Stream* Find(int32_t id) {
    auto it = streams.find(id);
    return it == streams.end() ? nullptr : it->second.get();
  }
  // From a callback: end the connection with GOAWAY(code) once mem_recv returns.
  int Fail(uint32_t code, std::string why) {
    if (fail_code == 0) {
      fail_code = code;
      reason = std::move(why);
    }
    return NGHTTP2_ERR_CALLBACK_FAILURE;
  }
  void Reject(Stream* s, ErrorCode code, const std::string& detail) {
    if (s->rejected) return;
    s->rejected = true;
    s->head_done = true;
    if (s->unconsumed > 0) nghttp2_session_consume(session, s->id, s->unconsumed);
    s->unconsumed = 0;
    handler->OnRequestRejected(s->id, code, detail);
  }
  void OnHead(Stream* s, bool end_stream);
  void OnRequestDone(Stream* s);
  void OnData(Stream* s, const uint8_t* data, size_t len);
  int OnFrameRecv(const nghttp2_frame* frame);
  int OnFrameSend(const nghttp2_frame* frame);
  void OnClose(int32_t id, uint32_t error_code);
  bool Submit(Stream* s, const H2Fields& fields, bool with_body);
  void Setup();
};

void H2Session::Impl::OnHead(Stream* s, bool end_stream) {
  s->head_done = true;
  ErrorCode code = ErrorCode::kBadRequest;
  std::string detail;
  if (!s->builder.Finish(&s->request, &code, &detail)) return Reject(s, code, detail);
  s->plan = handler->OnRequestHead(s->id, s->request, end_stream);
  const uint64_t max = s->plan.max_body;
  if (s->plan.mode == H2BodyPlan::Mode::kBuffer && max > 0 &&
      s->request.content_length > static_cast<int64_t>(max)) {
    return Reject(s, ErrorCode::kRequestTooLarge,
                  "The Content-Length " + std::to_string(s->request.content_length) +
                      " is over the limit of " + std::to_string(max) + " bytes.");
  }
  if (end_stream) OnRequestDone(s);
}

void H2Session::Impl::OnRequestDone(Stream* s) {
  if (s->request_done || s->rejected || !s->head_done) return;
  s->request_done = true;
  if (s->plan.mode == H2BodyPlan::Mode::kBuffer) {
    handler->OnRequest(s->id, std::move(s->request));
  } else {
    handler->OnRequestEnd(s->id);
  }
}

void H2Session::Impl::OnData(Stream* s, const uint8_t* data, size_t len) {
  if (s->rejected || !s->head_done) {
    nghttp2_session_consume(session, s->id, len);
    return;
  }
  const std::string_view piece(reinterpret_cast<const char*>(data), len);
  if (s->plan.mode == H2BodyPlan::Mode::kStream) {
    s->unconsumed += len;
    handler->OnRequestBody(s->id, piece);
    return;
  }
  nghttp2_session_consume(session, s->id, len);  // buffered: bounded by max_body
  const uint64_t max = s->plan.max_body;
  if (max > 0 && s->request.body.size() + len > max) {
    return Reject(s, ErrorCode::kRequestTooLarge,
                  "The request body is over the limit of " + std::to_string(max) + " bytes.");
  }
  s->request.body.append(piece);
}

int H2Session::Impl::OnFrameRecv(const nghttp2_frame* frame) {
  const bool end_stream = (frame->hd.flags & NGHTTP2_FLAG_END_STREAM) != 0;
  Stream* s = frame->hd.stream_id != 0 ? Find(frame->hd.stream_id) : nullptr;
  switch (frame->hd.type) {
    case NGHTTP2_HEADERS:
      if (s == nullptr) return 0;
      if (frame->headers.cat == NGHTTP2_HCAT_REQUEST) {
        OnHead(s, end_stream);
      } else if (end_stream) {
        OnRequestDone(s);  // trailers end the request; their fields are not forwarded
      }
      return 0;
    case NGHTTP2_DATA:
      if (frame->hd.length == 0 && !end_stream && !control.Take(clock())) {
        return Fail(NGHTTP2_ENHANCE_YOUR_CALM, "a flood of empty DATA frames");
      }
      if (s != nullptr && end_stream) OnRequestDone(s);
      return 0;
    case NGHTTP2_PING:
    case NGHTTP2_SETTINGS:
      if ((frame->hd.flags & NGHTTP2_FLAG_ACK) != 0) return 0;
      [[fallthrough]];
    case NGHTTP2_PRIORITY:
      if (!control.Take(clock())) {
        return Fail(NGHTTP2_ENHANCE_YOUR_CALM, "a flood of PING, SETTINGS or PRIORITY frames");
      }
      return 0;
    case NGHTTP2_RST_STREAM:
      // nghttp2's own limit (where it has one) queues a GOAWAY but reads on to the end of the
      // input; this one stops at once.
      if (!resets.Take(clock())) return Fail(NGHTTP2_ENHANCE_YOUR_CALM, "rapid stream resets");
      return 0;
    default:
      return 0;
  }
}

int H2Session::Impl::OnFrameSend(const nghttp2_frame* frame) {
  if (frame->hd.type == NGHTTP2_GOAWAY) {
    goaway_code = frame->goaway.error_code;
    if (goaway_code != NGHTTP2_NO_ERROR) failed = true;  // a connection error nghttp2 found
    return 0;
  }
  if (frame->hd.type != NGHTTP2_HEADERS && frame->hd.type != NGHTTP2_DATA) return 0;
  if ((frame->hd.flags & NGHTTP2_FLAG_END_STREAM) == 0) return 0;
  Stream* s = Find(frame->hd.stream_id);
  if (s == nullptr) return 0;
  s->answered = true;
  // Answered before the request ended (a refusal, an early answer): the rest is not wanted
  // (RFC 9113 §8.1).
  if (nghttp2_session_get_stream_remote_close(session, s->id) == 0) {
    nghttp2_submit_rst_stream(session, NGHTTP2_FLAG_NONE, s->id, NGHTTP2_NO_ERROR);
  }
  return 0;
}

void H2Session::Impl::OnClose(int32_t id, uint32_t error_code) {
  auto it = streams.find(id);
  if (it == streams.end()) return;
  std::unique_ptr<Stream> s = std::move(it->second);
  streams.erase(it);
  if (s->unconsumed > 0) nghttp2_session_consume(session, id, s->unconsumed);
  if (!s->head_done) return;  // never reported: nothing to tell
  handler->OnStreamClosed(id, s->answered ? H2StreamEnd::kAnswered : H2StreamEnd::kReset,
                          error_code);
}

namespace {

using Impl = H2Session::Impl;

Impl* Of(void* user_data) { return static_cast<Impl*>(user_data); }

int BeginHeadersCb(nghttp2_session*, const nghttp2_frame* frame, void* user_data) {
  Impl* impl = Of(user_data);
  impl->continuations = 0;
  if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST) return 0;
  impl->streams[frame->hd.stream_id] =
      std::make_unique<Impl::Stream>(frame->hd.stream_id, impl->limits);
  return 0;
}

int HeaderCb(nghttp2_session*, const nghttp2_frame* frame, const uint8_t* name, size_t namelen,
             const uint8_t* value, size_t valuelen, uint8_t, void* user_data) {
  Impl* impl = Of(user_data);
  Impl::Stream* s = impl->Find(frame->hd.stream_id);
  if (s == nullptr || frame->headers.cat != NGHTTP2_HCAT_REQUEST) return 0;  // trailers: dropped
  const std::string_view n(reinterpret_cast<const char*>(name), namelen);
  const std::string_view v(reinterpret_cast<const char*>(value), valuelen);
  if (!s->builder.Add(n, v)) {
    return impl->Fail(NGHTTP2_ENHANCE_YOUR_CALM,
                      "a header list decoded far past limits.max_header_bytes (compression bomb)");
  }
  return 0;
}

int FrameRecvCb(nghttp2_session*, const nghttp2_frame* frame, void* user_data) {
  return Of(user_data)->OnFrameRecv(frame);
}

int DataChunkCb(nghttp2_session*, uint8_t, int32_t stream_id, const uint8_t* data, size_t len,
                void* user_data) {
  Impl* impl = Of(user_data);
  Impl::Stream* s = impl->Find(stream_id);
  if (s == nullptr) {
    nghttp2_session_consume(impl->session, stream_id, len);
    return 0;
  }
  impl->OnData(s, data, len);
  return 0;
}

int FrameSendCb(nghttp2_session*, const nghttp2_frame* frame, void* user_data) {
  return Of(user_data)->OnFrameSend(frame);
}

int StreamCloseCb(nghttp2_session*, int32_t stream_id, uint32_t error_code, void* user_data) {
  Of(user_data)->OnClose(stream_id, error_code);
  return 0;
}

int ErrorCb(nghttp2_session*, int, const char* msg, size_t len, void* user_data) {
  Impl* impl = Of(user_data);
  if (impl->reason.empty()) impl->reason.assign(msg, len);
  return 0;
}

#ifndef IDEMGATE_HAVE_NGHTTP2_MAX_CONTINUATIONS
int BeginFrameCb(nghttp2_session*, const nghttp2_frame_hd* hd, void* user_data) {
  Impl* impl = Of(user_data);
  if (hd->type != NGHTTP2_CONTINUATION) return 0;
  if (++impl->continuations > impl->limits.max_continuations) {
    return impl->Fail(NGHTTP2_ENHANCE_YOUR_CALM, "a flood of CONTINUATION frames");
  }
  return 0;
}
#endif

ssize_t ReadBodyCb(nghttp2_session*, int32_t, uint8_t* buf, size_t length, uint32_t* flags,
                   nghttp2_data_source* source, void* user_data) {
  Impl* impl = Of(user_data);
  auto* s = static_cast<Impl::Stream*>(source->ptr);
  if (s->whole != nullptr) {
    const std::string& body = s->whole->body;
    const size_t n = std::min(length, body.size() - s->whole_sent);
    std::memcpy(buf, body.data() + s->whole_sent, n);
    s->whole_sent += n;
    if (s->whole_sent == body.size()) *flags |= NGHTTP2_DATA_FLAG_EOF;
    return static_cast<ssize_t>(n);
  }
  const size_t queued = s->out.size() - s->out_sent;
  if (queued == 0) {
    if (s->out_end) {
      *flags |= NGHTTP2_DATA_FLAG_EOF;
      return 0;
    }
    s->deferred = true;
    return NGHTTP2_ERR_DEFERRED;
  }
  const size_t n = std::min(length, queued);
  std::memcpy(buf, s->out.data() + s->out_sent, n);
  s->out_sent += n;
  if (s->out_sent > s->out.size() / 2) {
    s->out.erase(0, s->out_sent);
    s->out_sent = 0;
  }
  const size_t left = s->out.size() - s->out_sent;
  if (left <= kDrainedBytes && left + n > kDrainedBytes) impl->drained.push_back(s->id);
  if (left == 0 && s->out_end) *flags |= NGHTTP2_DATA_FLAG_EOF;
  return static_cast<ssize_t>(n);
}

}  // namespace

void H2Session::Impl::Setup() {
  nghttp2_session_callbacks* cbs = nullptr;
  nghttp2_session_callbacks_new(&cbs);
  nghttp2_session_callbacks_set_on_begin_headers_callback(cbs, BeginHeadersCb);
  nghttp2_session_callbacks_set_on_header_callback(cbs, HeaderCb);
  nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, FrameRecvCb);
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, DataChunkCb);
  nghttp2_session_callbacks_set_on_frame_send_callback(cbs, FrameSendCb);
  nghttp2_session_callbacks_set_on_stream_close_callback(cbs, StreamCloseCb);
  nghttp2_session_callbacks_set_error_callback2(cbs, ErrorCb);
#ifndef IDEMGATE_HAVE_NGHTTP2_MAX_CONTINUATIONS
  nghttp2_session_callbacks_set_on_begin_frame_callback(cbs, BeginFrameCb);
#endif
  nghttp2_option* opt = nullptr;
  nghttp2_option_new(&opt);
  nghttp2_option_set_no_auto_window_update(opt, 1);  // consume only what was forwarded
  nghttp2_option_set_max_outbound_ack(opt, limits.max_outbound_ack);
  nghttp2_option_set_max_settings(opt, 32);
  nghttp2_option_set_max_deflate_dynamic_table_size(opt, 4096);
#ifdef IDEMGATE_HAVE_NGHTTP2_RESET_RATE_LIMIT
  nghttp2_option_set_stream_reset_rate_limit(opt, limits.reset_burst, limits.reset_rate);
#endif
#ifdef IDEMGATE_HAVE_NGHTTP2_MAX_CONTINUATIONS
  nghttp2_option_set_max_continuations(opt, limits.max_continuations);
#endif
  nghttp2_session_server_new2(&session, cbs, this, opt);
  nghttp2_option_del(opt);
  nghttp2_session_callbacks_del(cbs);

  const nghttp2_settings_entry settings[] = {
      {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, limits.max_streams},
      {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, limits.stream_window},
      {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE,
       static_cast<uint32_t>(std::min<uint64_t>(limits.max_header_bytes, UINT32_MAX))},
      {NGHTTP2_SETTINGS_ENABLE_PUSH, 0},
      {NGHTTP2_SETTINGS_NO_RFC7540_PRIORITIES, 1},
  };
  nghttp2_submit_settings(session, NGHTTP2_FLAG_NONE, settings, std::size(settings));
  nghttp2_session_set_local_window_size(session, NGHTTP2_FLAG_NONE, 0,
                                        static_cast<int32_t>(limits.connection_window));
}

bool H2Session::Impl::Submit(Stream* s, const H2Fields& fields, bool with_body) {
  std::vector<nghttp2_nv> nva;
  nva.reserve(fields.size());
  for (const H2Field& f : fields) {
    nva.push_back({reinterpret_cast<uint8_t*>(const_cast<char*>(f.name.data())),
                   reinterpret_cast<uint8_t*>(const_cast<char*>(f.value.data())), f.name.size(),
                   f.value.size(), NGHTTP2_NV_FLAG_NONE});
  }
  nghttp2_data_provider provider{};
  provider.source.ptr = s;
  provider.read_callback = ReadBodyCb;
  s->answering = true;
  return nghttp2_submit_response(session, s->id, nva.data(), nva.size(),
                                 with_body ? &provider : nullptr) == 0;
}

H2Session::H2Session(H2SessionHandler* handler, H2Limits limits)
    : impl_(std::make_unique<Impl>(handler, std::move(limits))) {
  impl_->Setup();
}

H2Session::~H2Session() { nghttp2_session_del(impl_->session); }

bool H2Session::Receive(std::string_view bytes) {
  Impl& m = *impl_;
  if (m.failed) return false;
  const ssize_t rv = nghttp2_session_mem_recv(
      m.session, reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  if (rv >= 0) return nghttp2_session_want_read(m.session) != 0;
  m.failed = true;
  uint32_t code = m.fail_code;
  if (code == 0) {
    m.flooded = rv == NGHTTP2_ERR_FLOODED;
    code = m.flooded ? NGHTTP2_ENHANCE_YOUR_CALM : NGHTTP2_PROTOCOL_ERROR;
#ifdef IDEMGATE_HAVE_NGHTTP2_MAX_CONTINUATIONS
    if (rv == NGHTTP2_ERR_TOO_MANY_CONTINUATIONS) code = NGHTTP2_ENHANCE_YOUR_CALM;
#endif
    if (m.reason.empty()) m.reason = nghttp2_strerror(static_cast<int>(rv));
    if (m.flooded) m.reason = "the client floods frames to acknowledge without reading";
  }
  nghttp2_session_terminate_session(m.session, code);
  return false;
}

std::string_view H2Session::PullOutput() {
  Impl& m = *impl_;
  const uint8_t* data = nullptr;
  const ssize_t n = nghttp2_session_mem_send(m.session, &data);
  if (n < 0) {
    m.failed = true;
    if (m.reason.empty()) m.reason = nghttp2_strerror(static_cast<int>(n));
    return {};
  }
  std::vector<int32_t> drained = std::move(m.drained);
  m.drained.clear();
  for (int32_t id : drained) {
    if (m.Find(id) != nullptr) m.handler->OnResponseDrained(id);
  }
  return {reinterpret_cast<const char*>(data), static_cast<size_t>(n)};
}

bool H2Session::WantsWrite() const { return nghttp2_session_want_write(impl_->session) != 0; }

bool H2Session::Finished() const {
  const Impl& m = *impl_;
  if (m.flooded) return true;
  return nghttp2_session_want_read(m.session) == 0 && nghttp2_session_want_write(m.session) == 0;
}

uint32_t H2Session::goaway_code() const { return impl_->goaway_code; }
const std::string& H2Session::close_reason() const { return impl_->reason; }
size_t H2Session::open_streams() const { return impl_->streams.size(); }

bool H2Session::SubmitResponse(int32_t stream, H2Fields fields,
                               std::shared_ptr<const StoredResponse> response, bool send_body) {
  Impl::Stream* s = impl_->Find(stream);
  if (s == nullptr || s->answering) return false;
  const bool with_body = send_body && response != nullptr && !response->body.empty();
  if (with_body) s->whole = std::move(response);
  return impl_->Submit(s, fields, with_body);
}

bool H2Session::SubmitResponseHead(int32_t stream, H2Fields fields, bool end_stream) {
  Impl::Stream* s = impl_->Find(stream);
  if (s == nullptr || s->answering) return false;
  return impl_->Submit(s, fields, !end_stream);
}

bool H2Session::AppendBody(int32_t stream, std::string_view piece) {
  Impl::Stream* s = impl_->Find(stream);
  if (s == nullptr || !s->answering || s->whole != nullptr || s->out_end) return false;
  s->out.append(piece);
  if (s->deferred && !piece.empty()) {
    s->deferred = false;
    nghttp2_session_resume_data(impl_->session, stream);
  }
  return true;
}

bool H2Session::EndBody(int32_t stream) {
  Impl::Stream* s = impl_->Find(stream);
  if (s == nullptr || !s->answering || s->whole != nullptr || s->out_end) return false;
  s->out_end = true;
  if (s->deferred) {
    s->deferred = false;
    nghttp2_session_resume_data(impl_->session, stream);
  }
  return true;
}

size_t H2Session::BufferedBody(int32_t stream) const {
  const Impl::Stream* s = impl_->Find(stream);
  return s == nullptr ? 0 : s->out.size() - s->out_sent;
}

void H2Session::Consume(int32_t stream, size_t n) {
  Impl::Stream* s = impl_->Find(stream);
  if (s == nullptr) return;  // closed: what it had unacknowledged was returned then
  n = std::min(n, s->unconsumed);
  s->unconsumed -= n;
  if (n > 0) nghttp2_session_consume(impl_->session, stream, n);
}

void H2Session::ResetStream(int32_t stream, uint32_t error_code) {
  if (impl_->Find(stream) == nullptr) return;
  nghttp2_submit_rst_stream(impl_->session, NGHTTP2_FLAG_NONE, stream, error_code);
}

void H2Session::StartGracefulShutdown() {
  nghttp2_submit_goaway(impl_->session, NGHTTP2_FLAG_NONE,
                        nghttp2_session_get_last_proc_stream_id(impl_->session), NGHTTP2_NO_ERROR,
                        nullptr, 0);
}

void H2Session::Terminate(uint32_t error_code, std::string reason) {
  Impl& m = *impl_;
  if (m.reason.empty()) m.reason = std::move(reason);
  m.failed = true;
  nghttp2_session_terminate_session(m.session, error_code);
}

H2Preface MatchH2Preface(std::string_view bytes) {
  const size_t n = std::min(bytes.size(), kPreface.size());
  if (bytes.substr(0, n) != kPreface.substr(0, n)) return H2Preface::kNo;
  return n == kPreface.size() ? H2Preface::kYes : H2Preface::kMaybe;
}

}  // namespace idemgate
