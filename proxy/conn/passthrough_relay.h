// SPDX-License-Identifier: Apache-2.0
// Relaying one passthrough request (one the gateway does not guard): its body goes upstream as
// it is read, and the answer goes to a StreamSink as it arrives. Nothing is stored, so nothing is
// buffered whole: the request's body stops being read while the upstream has more than
// kRelayHigh bytes of it queued. The relay sees only its ClientEnv and its sink, so an HTTP/1.1
// connection and an HTTP/2 stream drive it alike, and tests/unit/conn drives it with fakes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "conf/config.h"
#include "proxy/conn/client_env.h"
#include "proxy/exchange/report_types.h"
#include "proxy/exchange/response_sink.h"
#include "proxy/http/http_message.h"
#include "proxy/policy/errors.h"
#include "proxy/upstream/upstream.h"

namespace idemgate {

// Queued bytes on the side being written above which the other side is no longer read, and
// below which it is read again.
inline constexpr size_t kRelayHigh = 256 << 10;
inline constexpr size_t kRelayLow = 64 << 10;

class PassthroughRelay final : public StreamReceiver {
 public:
  // `client_ip` must outlive the relay (the connection's).
  PassthroughRelay(ClientEnv* env, StreamSink* sink, const std::string& client_ip);
  ~PassthroughRelay() override;
  PassthroughRelay(const PassthroughRelay&) = delete;
  PassthroughRelay& operator=(const PassthroughRelay&) = delete;

  // A new relayed request under `config` (its route's): gives it its X-Request-Id and makes the
  // head that goes upstream. Its body follows through RequestBody and RequestEnd.
  void Begin(Request& head, const Config& config, bool tls);
  // The call starts with the head and what of the body came with it (a small request: all).
  void StartCall();
  void RequestBody(std::string_view piece);
  void RequestEnd();  // the request's last byte was read
  // The upstream takes the body slower than the client sends it: stop reading the client.
  void CheckUpstreamBacklog();
  // The client reads slower than the upstream sends (`paused`), or caught up again.
  void PauseResponse(bool paused);
  // The request broke off mid-body (malformed chunking): the call is cut. True when part of the
  // answer already went out (the connection must be cut); otherwise the caller answers `code`,
  // and that answer is counted there.
  bool Abort(ErrorCode code, const std::string& detail);
  // The client is gone: the call is cut, and the request counted as closed by the client.
  void ClientGone();

  bool call_started() const { return call_started_; }
  bool calling() const { return call_ != nullptr; }
  bool request_done() const { return request_done_; }
  bool request_paused() const { return client_paused_; }
  bool response_paused() const { return upstream_paused_; }
  const std::string& request_id() const { return request_id_; }  // this request's X-Request-Id

  // StreamReceiver: the upstream's answer.
  void OnResponseHead(Response&& head) override;
  void OnResponseBody(std::string_view piece) override;
  void OnRequestDrained() override;
  void OnResponseFlush() override;

 private:
  void OnDone(UpstreamResult&& result);
  void ResumeRequest();
  void Record(bool client_closed);

  ClientEnv* env_;
  StreamSink* sink_;
  const std::string& client_ip_;  // the connection's, set for each request before Begin
  StreamCall* call_ = nullptr;    // until the upstream call ends
  bool call_started_ = false;     // before: the head and the body read so far wait in `up_`
  std::string up_;                // the request's head (and body) not yet handed to the call
  StoredResponse head_out_;       // the answer's head as it goes on (its list's room is kept)
  UpstreamLimits limits_;
  bool head_request_ = false;
  bool request_done_ = false;     // the request's body was all read and relayed
  bool chunked_up_ = false;       // its body goes upstream chunked
  bool head_sent_ = false;        // the answer's head went to the sink
  bool client_paused_ = false;    // reading from the client stopped: the upstream is behind
  bool upstream_paused_ = false;  // reading from the upstream stopped: the client is behind
  bool recorded_ = true;          // counted and logged (nothing to count before Begin)
  Protocol protocol_ = Protocol::kHttp11;
  std::string method_, path_, request_id_, error_detail_;
  int status_ = 0;
  int upstream_status_ = 0;
  std::optional<ErrorCode> error_;
  std::optional<UpstreamError> upstream_error_;
  int64_t started_us_ = 0;
  int64_t upstream_us_ = -1;
  uint64_t bytes_out_ = 0;
};

}  // namespace idemgate
