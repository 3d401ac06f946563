// SPDX-License-Identifier: Apache-2.0
// The HTTP/2 side of a client connection (SPEC §14): an H2Session fed from the connection's
// bufferevent, each stream one Exchange answering through the stream's own ResponseSink, as an
// HTTP/1.1 request would, or (a passthrough request) one H2Relay streaming both ways. The
// ClientConn that found the preface owns it and hands it its socket events. Output is pulled from
// the session only while the socket's buffer is below a watermark, so a client that does not read
// stops the session producing (H4, H5).
#pragma once

#include <event2/bufferevent.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "proxy/conn/client_env.h"
#include "proxy/conn/conn_types.h"
#include "proxy/exchange/response_sink.h"
#include "proxy/http/h2_session.h"
#include "proxy/net/event_util.h"

namespace idemgate {

class Exchange;
struct Config;

// Whether a connection's first bytes begin the HTTP/2 preface (and HTTP/2 is on): kMaybe
// while too few bytes have come to tell.
H2Preface SniffH2(const Config& config, bufferevent* bev);

class H2Conn final : public H2SessionHandler {
 public:
  // `close`: ends the owning connection (never called re-entrantly from inside the session).
  H2Conn(ClientEnv* env, bufferevent* bev, std::string peer_ip, bool tls,
         std::function<void(CloseReason)> close);
  ~H2Conn() override;
  H2Conn(const H2Conn&) = delete;
  H2Conn& operator=(const H2Conn&) = delete;

  void Start();      // takes what is already in the input buffer
  void OnRead();     // more input
  void OnWritten();  // the output buffer drained below its low watermark
  void Shutdown();   // H6: GOAWAY; open streams finish, then the connection closes
  // The connection is gone: every exchange still running detaches (and stores its result).
  void DetachAll();

  // H2SessionHandler.
  H2BodyPlan OnRequestHead(int32_t stream, Request& head, bool end_stream) override;
  void OnRequest(int32_t stream, Request request) override;
  void OnRequestBody(int32_t stream, std::string_view piece) override;  // relayed streams
  void OnRequestEnd(int32_t stream) override;
  void OnRequestRejected(int32_t stream, ErrorCode code, const std::string& detail) override;
  void OnStreamClosed(int32_t stream, H2StreamEnd how, uint32_t error_code) override;
  void OnResponseDrained(int32_t stream) override;

 private:
  struct Stream;
  void Answer(Stream* stream, std::shared_ptr<const StoredResponse> response, bool replayed,
              std::string_view extra_headers);
  void SubmitError(int32_t stream, ErrorCode code, const std::string& detail);
  void Flush();
  void FlushSoon();
  void StartRelays();
  void OnIdleTimer();
  void OnRequestTimer();
  void ArmRequestTimer();
  void CloseNow(CloseReason reason);

  ClientEnv* env_;
  bufferevent* bev_;
  std::string peer_ip_;
  bool tls_;
  std::function<void(CloseReason)> close_;
  std::shared_ptr<const Config> config_;  // the config in force when the connection began
  H2Session session_;
  std::unordered_map<int32_t, std::unique_ptr<Stream>> streams_;
  std::vector<std::unique_ptr<Stream>> retired_;  // closed, freed on the next event
  std::vector<int32_t> starting_;  // relayed streams whose upstream call starts after Receive
  // Streams whose request has not fully arrived, oldest first, with their deadline
  // (client_timeout).
  std::deque<std::pair<int64_t, int32_t>> deadlines_;
  Timer idle_timer_;
  Timer request_timer_;
  EventPtr flush_soon_;  // FlushSoon's: Flush once this round of events has run
  bool in_session_ = false;  // inside session_.Receive: its callbacks must not pull output
  bool flushing_ = false;    // inside Flush: a nested Flush leaves the output to it
  bool closed_ = false;
};

}  // namespace idemgate
