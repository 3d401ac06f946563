// SPDX-License-Identifier: Apache-2.0
// H2Relay: a passthrough stream's body upstream as it comes, its answer back as it arrives,
// each direction held back while the other side is behind.
#include "proxy/conn/h2_relay.h"

#include <cstdio>
#include <utility>

#include "proxy/conn/client_env.h"
#include "proxy/exchange/exchange.h"
#include "proxy/exchange/report.h"
#include "proxy/http/request_id.h"
#include "proxy/upstream/upstream_group.h"

namespace idemgate {
namespace {

// Request bytes queued toward the upstream above which the client's are no longer
// acknowledged; answer bytes queued on the stream above which the upstream is not read.
constexpr size_t kUpstreamHigh = 256 << 10;
constexpr size_t kStreamHigh = 256 << 10;
constexpr char kLastChunk[] = "0\r\n\r\n";

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

H2Relay::H2Relay(ClientEnv* env, H2Session* session, std::function<void()> flush, int32_t stream,
                 std::string peer_ip, bool tls)
    : env_(env),
      session_(session),
      flush_(std::move(flush)),
      stream_(stream),
      peer_ip_(std::move(peer_ip)),
      tls_(tls) {}

H2Relay::~H2Relay() {
  if (call_ != nullptr) call_->Cancel();
}

void H2Relay::Start(Request head, bool end_stream, const Config& route) {
  started_us_ = env_->MonoUs();
  request_id_ = AssignRequestId(&head);
  method_ = head.method;
  path_ = std::string(head.Path());
  head_request_ = head.method == "HEAD";
  // A body without a content-length goes upstream chunked, as DATA frames come.
  chunked_up_ = !end_stream && head.content_length < 0;
  head.chunked = chunked_up_;
  UpstreamLimits limits;
  limits.connect_timeout_ms = route.upstream.connect_timeout_ms;
  limits.response_timeout_ms = route.upstream.response_timeout_ms;
  limits.max_response_body = UINT64_MAX;  // relayed, not stored: no cap of its own
  limits.idle_timeout_ms = route.upstream.idle_timeout_ms;
  limits.group = route.upstream_group;
  std::string up = SerializeUpstreamRequestHead(head, peer_ip_, tls_ ? "https" : "http",
                                                UpstreamHost(route.upstream), route.upstream.host);
  call_ = env_->SendStream(std::move(up), head_request_, limits, this,
                           [this](UpstreamResult result) { OnDone(std::move(result)); });
  if (call_ == nullptr) OnDone(MissingGroupResult(limits.group));  // no such group now
}

void H2Relay::OnBody(std::string_view piece) {
  if (call_ == nullptr || piece.empty()) {  // answered (or failed): the rest is dropped
    session_->Consume(stream_, piece.size());
    return;
  }
  if (chunked_up_) {
    char size_line[24];
    const int n = snprintf(size_line, sizeof(size_line), "%zx\r\n", piece.size());
    call_->WriteBody(std::string_view(size_line, static_cast<size_t>(n)), piece, "\r\n");
  } else {
    call_->WriteBody({}, piece);
  }
  // Acknowledged now, or once the upstream has taken what is queued (OnRequestDrained).
  if (call_->Unsent() <= kUpstreamHigh && unconsumed_ == 0) {
    session_->Consume(stream_, piece.size());
  } else {
    unconsumed_ += piece.size();
  }
}

void H2Relay::OnEnd() {
  if (call_ == nullptr) return;
  if (chunked_up_) call_->WriteBody({}, kLastChunk);
  call_->EndBody();
}

void H2Relay::OnRequestDrained() {
  if (unconsumed_ == 0) return;
  session_->Consume(stream_, unconsumed_);
  unconsumed_ = 0;
  flush_();  // the WINDOW_UPDATE
}

void H2Relay::OnResponseHead(Response head) {
  upstream_status_ = head.status;
  status_ = head.status;
  StoredResponse stored = ToStoredResponse(head, head_request_, AnswerUse::kRelayed);
  no_body_ = head_request_ || head.status == 204 || head.status == 304;
  const int64_t length =
      no_body_ || head.chunked || head.content_length < 0 ? -1 : head.content_length;
  session_->SubmitResponseHead(stream_, H2StreamedAnswerFields(stored, length, request_id_),
                               no_body_);
  head_sent_ = true;
}

void H2Relay::OnResponseBody(std::string_view piece) {
  if (no_body_) return;
  bytes_out_ += piece.size();
  session_->AppendBody(stream_, piece);
  if (!upstream_paused_ && call_ != nullptr && session_->BufferedBody(stream_) > kStreamHigh) {
    upstream_paused_ = true;
    call_->PauseResponse(true);
  }
}

void H2Relay::OnResponseFlush() { flush_(); }

void H2Relay::OnDrained() {
  if (!upstream_paused_ || call_ == nullptr) return;
  upstream_paused_ = false;
  call_->PauseResponse(false);
}

void H2Relay::OnStreamGone(bool reset) {
  if (call_ != nullptr) {
    call_->Cancel();  // the client is gone: so is the relayed call
    call_ = nullptr;
  }
  if (!recorded_ && started_us_ != 0) Record(reset);
}

void H2Relay::OnDone(UpstreamResult result) {
  call_ = nullptr;
  upstream_us_ = env_->MonoUs() - started_us_;
  upstream_error_ = result.error;
  if (unconsumed_ > 0) {  // nothing more goes upstream: what waited is acknowledged, dropped
    session_->Consume(stream_, unconsumed_);
    unconsumed_ = 0;
  }
  if (result.error == UpstreamError::kNone) {
    if (head_sent_ && !no_body_) session_->EndBody(stream_);
  } else if (head_sent_) {
    error_detail_ = result.detail;
    session_->ResetStream(stream_, kH2InternalError);  // cut: the body is short
  } else {
    // Nothing of the answer went out: the gateway's error answer, as on the buffered path.
    error_detail_ = result.detail;
    error_ = ErrorFor(result.error);
    auto answer = std::make_shared<const StoredResponse>(MakeErrorResponse(*error_));
    status_ = answer->status;
    bytes_out_ = answer->body.size();
    bool send_body = false;
    H2Fields fields = H2AnswerFields(*answer, false, {}, head_request_, request_id_, &send_body);
    session_->SubmitResponse(stream_, std::move(fields), answer, send_body);
  }
  Record(false);
  flush_();
}

void H2Relay::Record(bool client_closed) {
  recorded_ = true;
  RequestReport report;
  report.outcome = Outcome::kPassthrough;
  report.error = error_;
  report.status = status_;
  report.upstream_status = upstream_status_;
  report.upstream_error = upstream_error_;
  report.total_us = env_->MonoUs() - started_us_;
  report.upstream_us = upstream_us_;
  report.method = method_;
  report.path = path_;
  report.client_ip = peer_ip_;
  report.request_id = request_id_;
  report.error_detail = error_detail_;
  report.bytes_out = bytes_out_;
  report.client_closed = client_closed;
  RecordReport(*env_, report);
}

}  // namespace idemgate
