// SPDX-License-Identifier: Apache-2.0
// The passthrough relay's state machine (see passthrough_relay.h): the request's head and body
// upstream with back-pressure, the answer handed to the sink as it arrives, one report at the end.
#include "proxy/conn/passthrough_relay.h"

#include <cstdio>

#include "proxy/exchange/report.h"
#include "proxy/http/request_id.h"
#include "proxy/upstream/upstream_group.h"

namespace idemgate {

namespace {
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

PassthroughRelay::PassthroughRelay(ClientEnv* env, StreamSink* sink, const std::string& client_ip)
    : env_(env), sink_(sink), client_ip_(client_ip) {}

PassthroughRelay::~PassthroughRelay() {
  if (call_ != nullptr) call_->Cancel();
}

void PassthroughRelay::Begin(Request& head, const Config& config, bool tls) {
  call_ = nullptr;
  call_started_ = request_done_ = head_sent_ = false;
  client_paused_ = upstream_paused_ = recorded_ = false;
  error_detail_.clear();
  status_ = upstream_status_ = 0;
  error_.reset();
  upstream_error_.reset();
  upstream_us_ = -1;
  bytes_out_ = 0;
  started_us_ = env_->MonoUs();
  chunked_up_ = head.chunked;
  head_request_ = head.method == "HEAD";
  AssignRequestId(&head, &request_id_);
  method_ = head.method;
  protocol_ = ProtocolOf(head.http_major, head.http_minor);
  path_ = std::string(head.Path());
  limits_ = UpstreamLimits{};
  limits_.connect_timeout_ms = config.upstream.connect_timeout_ms;
  limits_.response_timeout_ms = config.upstream.response_timeout_ms;
  limits_.max_response_body = UINT64_MAX;  // relayed, not stored: no cap of its own
  limits_.idle_timeout_ms = config.upstream.idle_timeout_ms;
  limits_.group = config.upstream_group;  // a route's group ("" = [upstream])
  up_ = SerializeUpstreamRequestHead(head, client_ip_, tls ? "https" : "http",
                                     UpstreamHost(config.upstream), config.upstream.host);
}

void PassthroughRelay::StartCall() {
  call_started_ = true;
  call_ = env_->SendStream(std::move(up_), head_request_, limits_, this,
                           [this](UpstreamResult&& result) { OnDone(std::move(result)); });
  std::string().swap(up_);
  if (call_ == nullptr) return OnDone(MissingGroupResult(limits_.group));
  if (request_done_) call_->EndBody();
  CheckUpstreamBacklog();
}

void PassthroughRelay::RequestBody(std::string_view piece) {
  if (call_started_ && call_ == nullptr) return;  // answered: the rest is dropped
  if (chunked_up_ && piece.empty()) return;       // an empty chunk would end the body
  char size_line[24];
  std::string_view prefix, suffix;
  if (chunked_up_) {
    int n = snprintf(size_line, sizeof(size_line), "%zx\r\n", piece.size());
    prefix = std::string_view(size_line, static_cast<size_t>(n));
    suffix = "\r\n";
  }
  if (call_started_) return call_->WriteBody(prefix, piece, suffix);
  up_.append(prefix).append(piece).append(suffix);
}

void PassthroughRelay::RequestEnd() {
  request_done_ = true;
  if (!call_started_) {
    if (chunked_up_) up_.append(kLastChunk, 5);
  } else if (call_ != nullptr) {
    if (chunked_up_) call_->WriteBody({}, kLastChunk);
    call_->EndBody();
  }
  if (client_paused_) ResumeRequest();
}

void PassthroughRelay::CheckUpstreamBacklog() {
  if (call_ == nullptr || client_paused_) return;
  if (call_->Unsent() <= kRelayHigh) return;
  client_paused_ = true;
  sink_->PauseRequestBody(true);
}

void PassthroughRelay::ResumeRequest() {
  client_paused_ = false;
  sink_->PauseRequestBody(false);
}

void PassthroughRelay::OnRequestDrained() {
  if (!client_paused_) return;
  ResumeRequest();
  sink_->ReadRequestBody();
}

void PassthroughRelay::PauseResponse(bool paused) {
  if (call_ == nullptr || upstream_paused_ == paused) return;
  upstream_paused_ = paused;
  call_->PauseResponse(paused);
}

void PassthroughRelay::OnResponseHead(Response&& head) {
  upstream_status_ = head.status;
  status_ = head.status;
  const int64_t length = head.content_length >= 0 && !head.chunked ? head.content_length : -1;
  ToStoredResponse(head, head_request_, AnswerUse::kRelayed, &head_out_);
  head_sent_ = true;
  sink_->SendHead(head_out_, length, request_id_, request_done_);
}

void PassthroughRelay::OnResponseBody(std::string_view piece) {
  bytes_out_ += piece.size();
  sink_->SendBody(piece);
}

void PassthroughRelay::OnResponseFlush() { sink_->Flush(); }

void PassthroughRelay::OnDone(UpstreamResult&& result) {
  call_ = nullptr;
  if (client_paused_) ResumeRequest();  // nothing more goes upstream; the rest is dropped
  upstream_us_ = env_->MonoUs() - started_us_;
  upstream_error_ = result.error;
  if (result.error == UpstreamError::kNone || head_sent_) {
    // The answer's last byte went to the sink, or the upstream failed in the middle of it (the
    // client sees a truncated body).
    const bool clean = result.error == UpstreamError::kNone;
    if (!clean) error_detail_ = result.detail;
    Record(false);
    return sink_->EndStream(clean, request_done_);
  }
  // Nothing of the answer went out: the gateway's error answer, as on the buffered path.
  error_detail_ = result.detail;
  ErrorCode code = ErrorFor(result.error);
  error_ = code;
  StoredResponse response = MakeErrorResponse(code);
  status_ = response.status;
  bytes_out_ = response.body.size();
  Record(false);
  sink_->SendError(std::make_shared<const StoredResponse>(std::move(response)), request_done_);
}

bool PassthroughRelay::Abort(ErrorCode code, const std::string& detail) {
  if (call_ != nullptr) {
    call_->Cancel();
    call_ = nullptr;
  }
  error_ = code;
  error_detail_ = detail;
  upstream_error_ = UpstreamError::kFailed;
  upstream_us_ = env_->MonoUs() - started_us_;
  if (head_sent_) {
    Record(false);
    return true;
  }
  recorded_ = true;  // the caller's error answer is counted and logged
  return false;
}

void PassthroughRelay::ClientGone() {
  if (call_ != nullptr) {
    call_->Cancel();  // the client is gone: so is the relayed call
    call_ = nullptr;
  }
  if (!recorded_) Record(true);
}

void PassthroughRelay::Record(bool client_closed) {
  if (recorded_) return;
  recorded_ = true;
  RequestReport report;
  report.outcome = Outcome::kPassthrough;
  report.protocol = protocol_;
  report.error = error_;
  report.status = status_;
  report.upstream_status = upstream_status_;
  report.upstream_error = upstream_error_;
  report.total_us = env_->MonoUs() - started_us_;
  report.upstream_us = upstream_us_;
  report.method = method_;
  report.path = path_;
  report.client_ip = client_ip_;
  report.request_id = request_id_;
  report.error_detail = error_detail_;
  report.bytes_out = bytes_out_;
  report.client_closed = client_closed;
  RecordReport(*env_, report);
}

}  // namespace idemgate
