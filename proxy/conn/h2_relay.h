// SPDX-License-Identifier: Apache-2.0
// One passthrough request on an HTTP/2 stream (SPEC §14 H5: flow control both ways): the
// stream is the StreamSink of a PassthroughRelay, the same relay an HTTP/1.1 connection drives,
// so the upstream call, its errors and its one report are the relay's. What is the stream's
// own: "stop reading the request" means its DATA is no longer acknowledged (WINDOW_UPDATE)
// until the upstream took what is queued, and the upstream is not read while the stream has
// more than kRelayHigh of the answer waiting for the client's window. Nothing is stored.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "proxy/conn/passthrough_relay.h"
#include "proxy/exchange/response_sink.h"
#include "proxy/http/h2_session.h"

namespace idemgate {

class ClientEnv;
struct Config;

class H2Relay final : public StreamSink {
 public:
  // `flush`: sends what the session has queued (when not inside the session).
  H2Relay(ClientEnv* env, H2Session* session, std::function<void()> flush, int32_t stream,
          std::string peer_ip, bool tls);
  H2Relay(const H2Relay&) = delete;
  H2Relay& operator=(const H2Relay&) = delete;

  // The stream's head (`end_stream`: no body) under its route. The upstream call starts at
  // StartCall, which the connection calls once the bytes read with the head are handed on: the
  // DATA that came with it then goes upstream in the same write as the head.
  void Start(Request head, bool end_stream, const Config& route);
  void StartCall();
  void OnBody(std::string_view piece);
  void OnEnd();
  // The stream's queued answer went out (H2SessionHandler::OnResponseDrained).
  void OnDrained();
  // The stream closed before the relay ended (reset, or the connection went): the call is cut
  // and the request counted as closed by the client. After the answer's end: nothing to do.
  void OnStreamGone(bool reset);

  // StreamSink: the relay's answer, on the stream.
  void SendResponse(std::shared_ptr<const StoredResponse> response, bool replayed,
                    std::string_view extra_headers) override;
  void SendHead(const StoredResponse& head, int64_t length, std::string_view request_id,
                bool request_complete) override;
  void SendBody(std::string_view piece) override;
  void Flush() override;
  void EndStream(bool clean, bool request_complete) override;
  void SendError(std::shared_ptr<const StoredResponse> response, bool request_complete) override;
  void PauseRequestBody(bool paused) override;
  void ReadRequestBody() override {}  // the session hands DATA on as it comes

 private:
  H2Session* session_;
  std::function<void()> flush_;
  int32_t stream_;
  std::string peer_ip_;  // before relay_, which views it
  bool tls_;
  bool head_request_ = false;
  bool no_body_ = false;   // HEAD, 204, 304: the answer's head ends the stream
  bool pending_ = false;   // started, the upstream call not yet: DATA waits with the head
  bool paused_ = false;    // the upstream is behind: DATA is not acknowledged
  size_t unconsumed_ = 0;  // DATA forwarded while paused: acknowledged on resume
  PassthroughRelay relay_;
};

}  // namespace idemgate
