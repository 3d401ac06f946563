// SPDX-License-Identifier: Apache-2.0
// One passthrough request on an HTTP/2 stream, relayed (SPEC §14 H5: flow control both ways),
// as client_relay.cc relays one on an HTTP/1.1 connection: its body goes upstream as it comes
// and is acknowledged to the client (WINDOW_UPDATE) only once the upstream took it; the answer
// goes on the stream as it arrives, and the upstream is not read while the stream has more
// than a window's worth queued. Nothing is stored.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "proxy/http/h2_session.h"
#include "proxy/policy/errors.h"
#include "proxy/upstream/upstream.h"

namespace idemgate {

class ClientEnv;
struct Config;

class H2Relay final : public StreamReceiver {
 public:
  // `flush`: sends what the session has queued (when not inside the session).
  H2Relay(ClientEnv* env, H2Session* session, std::function<void()> flush, int32_t stream,
          std::string peer_ip, bool tls);
  ~H2Relay() override;  // a call still running is cancelled
  H2Relay(const H2Relay&) = delete;
  H2Relay& operator=(const H2Relay&) = delete;

  // The stream's head (`end_stream`: no body) under its route: the upstream call starts.
  void Start(Request head, bool end_stream, const Config& route);
  void OnBody(std::string_view piece);
  void OnEnd();
  // The stream's queued answer went out (H2SessionHandler::OnResponseDrained).
  void OnDrained();
  // The stream closed: reset by the client before the answer ended (the call is cut), or done.
  void OnStreamGone(bool reset);

  // StreamReceiver.
  void OnResponseHead(Response head) override;
  void OnResponseBody(std::string_view piece) override;
  void OnRequestDrained() override;
  void OnResponseFlush() override;

 private:
  void OnDone(UpstreamResult result);
  void Record(bool client_closed);

  ClientEnv* env_;
  H2Session* session_;
  std::function<void()> flush_;
  int32_t stream_;
  std::string peer_ip_;
  bool tls_;
  StreamCall* call_ = nullptr;  // until the call ends or is cancelled
  bool chunked_up_ = false;     // the body goes upstream chunked (no content-length came)
  bool head_request_ = false;
  bool head_sent_ = false;
  bool no_body_ = false;
  bool upstream_paused_ = false;
  bool recorded_ = false;
  size_t unconsumed_ = 0;  // body bytes forwarded while the upstream was behind: acked later
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
