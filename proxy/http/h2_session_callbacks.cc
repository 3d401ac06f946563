// SPDX-License-Identifier: Apache-2.0
// H2Session's nghttp2 side: the session set up with its limits, and its callbacks turned into
// stream events for the handler, answers into DATA frames, and floods into GOAWAY.
#include <cstring>

#include "proxy/http/h2_session_impl.h"

namespace idemgate {

using h2_internal::kDrainedBytes;

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
  // Expect: 100-continue (RFC 9110 §10.1.1), as over HTTP/1.1: the body is wanted, so the
  // client hears so at once; a request already answered gets no interim answer.
  if (s->request.expect_continue && !end_stream && !s->answering) SubmitContinue(s);
  if (end_stream) OnRequestDone(s);
}

void H2Session::Impl::SubmitContinue(Stream* s) {
  static const char kStatus[] = ":status";
  static const char kContinue[] = "100";
  nghttp2_nv nv{reinterpret_cast<uint8_t*>(const_cast<char*>(kStatus)),
                reinterpret_cast<uint8_t*>(const_cast<char*>(kContinue)), sizeof(kStatus) - 1,
                sizeof(kContinue) - 1, NGHTTP2_NV_FLAG_NONE};
  nghttp2_submit_headers(session, NGHTTP2_FLAG_NONE, s->id, nullptr, &nv, 1, nullptr);
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
    // A value new on every answer (X-Request-Id) would only push the repeated ones (server,
    // content-type) out of HPACK's dynamic table: sent as a literal, never indexed.
    const uint8_t flags =
        f.name == "x-request-id" ? NGHTTP2_NV_FLAG_NO_INDEX : NGHTTP2_NV_FLAG_NONE;
    nva.push_back({reinterpret_cast<uint8_t*>(const_cast<char*>(f.name.data())),
                   reinterpret_cast<uint8_t*>(const_cast<char*>(f.value.data())), f.name.size(),
                   f.value.size(), flags});
  }
  nghttp2_data_provider provider{};
  provider.source.ptr = s;
  provider.read_callback = ReadBodyCb;
  s->answering = true;
  return nghttp2_submit_response(session, s->id, nva.data(), nva.size(),
                                 with_body ? &provider : nullptr) == 0;
}

}  // namespace idemgate
