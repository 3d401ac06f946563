// SPDX-License-Identifier: Apache-2.0
// One client connection: read -> parse -> Exchange -> write, keep-alive and pipelining in
// order, 100-continue, client and idle timeouts. A passthrough request is relayed instead
// (PassthroughRelay; the connection is its sink, client_relay.cc): its body and its answer
// stream through, with back-pressure both ways. It sees its surroundings only as a ClientEnv.
#pragma once

#include <openssl/ssl.h>

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "conf/config.h"
#include "proxy/conn/client_env.h"
#include "proxy/conn/conn_types.h"
#include "proxy/conn/passthrough_relay.h"
#include "proxy/exchange/response_sink.h"
#include "proxy/http/http_parser.h"
#include "proxy/net/event_util.h"
#include "proxy/net/socket_reader.h"
#include "proxy/policy/errors.h"
#include "proxy/policy/forwarded.h"
#include "proxy/upstream/upstream.h"

namespace idemgate {

class Exchange;
class H2Conn;

class ClientConn final : public StreamSink {
 public:
  // `tls` (owned from here on; may be null) makes this an https connection.
  ClientConn(ClientEnv* env, evutil_socket_t fd, std::string peer_ip, SSL* tls = nullptr);
  ~ClientConn() override;
  void Start();

  // The exchange's answer. After it is written the connection reads the next request, or
  // closes when the client or the gateway asked for that. The body is sent by reference (a
  // replay's is shared with every other connection sending it); when what the socket does not
  // take at once would pass limits.max_unsent_bytes, the connection is closed instead.
  void SendResponse(std::shared_ptr<const StoredResponse> response, bool replayed,
                    std::string_view extra_headers) override;
  // Shutdown: close now when nothing is in progress; otherwise after the current answer.
  void CloseWhenIdle();
  bool tls() const { return tls_; }

  // StreamSink: a relayed answer, framed for HTTP/1.1 (client_relay.cc).
  void SendHead(const StoredResponse& head, int64_t length, std::string_view request_id,
                bool request_complete) override;
  void SendBody(std::string_view piece) override;
  void Flush() override;
  void EndStream(bool clean, bool request_complete) override;
  void SendError(std::shared_ptr<const StoredResponse> response, bool request_complete) override;
  void PauseRequestBody(bool paused) override;
  void ReadRequestBody() override;

 private:
  enum class State {
    kIdle,       // waiting for the first byte of a request (idle timer armed)
    kReading,    // a request has begun (client timer armed)
    kExchange,   // a complete request is being handled; input waits in the buffer
    kRelaying,   // a passthrough request and its answer stream through (client_relay.cc)
    kWriting,    // the answer is being written; then the next request is read
    kClosing,    // the last answer is being written; then the connection lingers
    kLingering,  // half-closed: discarding input until EOF or a short timeout
    kHttp2,      // the client sent the HTTP/2 preface: h2_ serves the connection
  };

  void StartTransport();  // TLS (after its first byte) or plain, once any PROXY header is read
  void AwaitProxyHeader();
  void OnProxyBytes();  // client_proxy_header.cc
  static void ReadCb(bufferevent*, void* arg);
  static void WriteCb(bufferevent*, void* arg);
  static void EventCb(bufferevent*, short what, void* arg);
  void StartStream(bool serve);
  void OnFirstBytes();
  bool TryHttp2();  // h2_conn.h: the preface starts HTTP/2 (SPEC §14 H1)
  void ProcessInput();
  void OnParsed();
  void StartExchange();
  void RespondError(ErrorCode code, const std::string& detail);
  void OnTimer();
  void Close(CloseReason reason);
  void BeginIdle();
  void BeginLinger();
  std::shared_ptr<const Config> RefreshLimits();
  [[nodiscard]] bool Write(std::string head, std::shared_ptr<const StoredResponse> body);
  [[nodiscard]] bool QueueBody(evbuffer* out, std::shared_ptr<const StoredResponse> body,
                               size_t offset);
  void OnWritten();
  // Reading the client on or off: the plain socket's reader, or the TLS bufferevent's.
  void EnableRead(bool on);

  // Relaying (client_relay.cc).
  bool DecideBody();
  void StartRelay(const Config& config);
  void QueueOut(std::string_view bytes);
  void FlushOut();
  void PauseUpstreamIfBehind();
  void AbortRelay(ErrorCode code, const std::string& detail);
  void OnRelayWritten();

  ClientEnv* env_;
  BufferEventPtr bev_;  // on a TLS port: made once the first byte tells TLS from plain HTTP
  SocketReader reader_;  // plain TCP: reads bev_'s socket (after bev_: it goes first)
  evutil_socket_t fd_ = -1;
  SSL* pending_tls_ = nullptr;  // owned until bev_ takes it
  EventPtr sniff_;              // waits for the first byte on a TLS port
  std::string peer_ip_;         // the TCP peer, or the client a PROXY header named
  std::string client_ip_;       // this request's client (listen.trusted_proxies: X-Forwarded-For)
  std::string proxy_head_;      // a PROXY header's bytes read so far
  std::unique_ptr<RequestParser> parser_;
  std::shared_ptr<const Config> parser_config_;  // the config the parser's limits came from
  std::shared_ptr<const Config> route_;          // a guarded request's route under it (DecideBody)
  int64_t client_timeout_ms_ = 0;
  Timer timer_;
  EventPtr resume_;  // continues after an answer the socket took at once
  State state_ = State::kIdle;
  Exchange* exchange_ = nullptr;
  PassthroughRelay relay_;
  std::unique_ptr<H2Conn> h2_;
  std::string relay_out_;  // answer bytes gathered for one direct write to the client
  std::string relay_head_;  // a relayed answer's head, serialized (its room reused)
  static constexpr size_t kKeptOutBytes = 2048;  // both kept between answers up to this
  BodyFraming relay_framing_ = BodyFraming::kNone;
  bool write_low_set_ = false;  // the output's low watermark is set (back-pressure seen)
  bool continue_sent_ = false;
  bool close_after_ = false;   // answer with Connection: close, then close
  bool head_request_ = false;  // the exchange in progress is a HEAD
  bool http10_ = false;        // ... and came as HTTP/1.0 (keep-alive must be granted aloud)
  bool read_eof_ = false;      // the client half-closed
  bool closed_ = false;
  bool tls_ = false;
};

}  // namespace idemgate
