// SPDX-License-Identifier: Apache-2.0
// H2Session: nghttp2's server session driven by memory (mem_recv / mem_send); its callbacks
// and limits are in h2_session_callbacks.cc.
#include "proxy/http/h2_session.h"

#include "proxy/http/h2_session_impl.h"

namespace idemgate {
namespace {

constexpr std::string_view kPreface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

}  // namespace

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
  // The streams that drained in the last send hear it first, before this send: a handler that
  // queues more there, or pulls output itself, must not run between mem_send and the caller's
  // use of its bytes (valid only until the next mem_send).
  std::vector<int32_t> drained = std::move(m.drained);
  m.drained.clear();
  for (int32_t id : drained) {
    if (m.Find(id) != nullptr) m.handler->OnResponseDrained(id);
  }
  const uint8_t* data = nullptr;
  const ssize_t n = nghttp2_session_mem_send(m.session, &data);
  if (n < 0) {
    m.failed = true;
    if (m.reason.empty()) m.reason = nghttp2_strerror(static_cast<int>(n));
    return {};
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
