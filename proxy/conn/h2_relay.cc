// SPDX-License-Identifier: Apache-2.0
// H2Relay: the stream's events drive its PassthroughRelay, and the relay's answer goes on the
// stream, each direction held back while the other side is behind.
#include "proxy/conn/h2_relay.h"

#include <utility>

namespace idemgate {

H2Relay::H2Relay(ClientEnv* env, H2Session* session, std::function<void()> flush, int32_t stream,
                 std::string peer_ip, bool tls)
    : session_(session),
      flush_(std::move(flush)),
      stream_(stream),
      peer_ip_(std::move(peer_ip)),
      tls_(tls),
      relay_(env, this, peer_ip_) {}

void H2Relay::Start(Request head, bool end_stream, const Config& route) {
  head_request_ = head.method == "HEAD";
  // A body without a content-length goes upstream chunked, as DATA frames come.
  head.chunked = !end_stream && head.content_length < 0;
  relay_.Begin(head, route, tls_);
  pending_ = true;
}

void H2Relay::StartCall() {
  if (!pending_) return;
  pending_ = false;
  relay_.StartCall();
}

void H2Relay::OnBody(std::string_view piece) {
  if (pending_) {  // one read's worth at most: it goes out with the head
    relay_.RequestBody(piece);
    session_->Consume(stream_, piece.size());
    return;
  }
  if (!relay_.calling() || piece.empty()) {  // answered (or failed): the rest is dropped
    session_->Consume(stream_, piece.size());
    return;
  }
  relay_.RequestBody(piece);
  relay_.CheckUpstreamBacklog();  // may pause: then acknowledged once the upstream took it
  if (paused_) {
    unconsumed_ += piece.size();
  } else {
    session_->Consume(stream_, piece.size());
  }
}

void H2Relay::OnEnd() { relay_.RequestEnd(); }

void H2Relay::OnDrained() { relay_.PauseResponse(false); }

void H2Relay::OnStreamGone(bool) {
  pending_ = false;  // never called
  relay_.ClientGone();
}

void H2Relay::PauseRequestBody(bool paused) {
  paused_ = paused;
  if (paused || unconsumed_ == 0) return;
  session_->Consume(stream_, unconsumed_);
  unconsumed_ = 0;
  flush_();  // the WINDOW_UPDATE
}

void H2Relay::SendHead(const StoredResponse& head, int64_t length, std::string_view request_id,
                       bool) {
  no_body_ = head_request_ || head.status == 204 || head.status == 304;
  session_->SubmitResponseHead(
      stream_, H2StreamedAnswerFields(head, no_body_ ? -1 : length, request_id), no_body_);
}

void H2Relay::SendBody(std::string_view piece) {
  if (no_body_) return;
  session_->AppendBody(stream_, piece);
  if (session_->BufferedBody(stream_) > kRelayHigh) relay_.PauseResponse(true);
}

void H2Relay::Flush() { flush_(); }

void H2Relay::EndStream(bool clean, bool) {
  if (!clean) {
    session_->ResetStream(stream_, kH2InternalError);  // cut: the body is short
  } else if (!no_body_) {
    session_->EndBody(stream_);
  }
  flush_();
}

void H2Relay::SendError(std::shared_ptr<const StoredResponse> response, bool) {
  SendResponse(std::move(response), false, {});
}

void H2Relay::SendResponse(std::shared_ptr<const StoredResponse> response, bool replayed,
                           std::string_view extra_headers) {
  bool send_body = false;
  H2Fields fields = H2AnswerFields(*response, replayed, extra_headers, head_request_,
                                   relay_.request_id(), &send_body);
  session_->SubmitResponse(stream_, std::move(fields), std::move(response), send_body);
  flush_();
}

}  // namespace idemgate
