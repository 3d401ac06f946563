// SPDX-License-Identifier: Apache-2.0
// One HTTP/2 server connection as a pure session (SPEC §14): bytes in -> stream events out,
// answers in -> bytes out. It knows no socket, loop or timer; nghttp2 stays inside
// h2_session*.cc. Each stream's request head becomes our Request (`:method`, `:path` as the
// target, `:authority` as Host), its body is buffered up to a limit or streamed with flow
// control (a byte is acknowledged to the client only once the caller says it was forwarded),
// and the hardening of H5 ends an abusive connection with GOAWAY.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "proxy/http/error_types.h"
#include "proxy/http/h2_fields.h"
#include "proxy/http/http_message.h"
#include "store/record.h"

namespace idemgate {

struct H2Limits {
  uint32_t max_streams = 100;  // limits.http2_max_streams (SETTINGS_MAX_CONCURRENT_STREAMS)
  uint64_t max_header_bytes = 64 << 10;  // limits.max_header_bytes, counted as the HTTP/1.1 head
  // A header list decoded past this many times max_header_bytes is a compression bomb: GOAWAY.
  uint32_t header_bomb_factor = 4;
  uint32_t stream_window = 64 << 10;     // request bytes a stream may have unforwarded
  uint32_t connection_window = 1 << 20;  // ... and all streams together
  // Rapid reset: RST_STREAM frames from the client, a burst then a rate per second.
  uint64_t reset_burst = 1000;
  uint64_t reset_rate = 33;
  size_t max_continuations = 8;  // CONTINUATION frames after one HEADERS
  // PING, SETTINGS, PRIORITY and empty DATA frames: a burst then a rate per second.
  uint64_t control_burst = 1000;
  uint64_t control_rate = 100;
  // Frame acknowledgements (SETTINGS, PING) queued while the caller takes no output: past it
  // the client is flooding without reading.
  size_t max_outbound_ack = 1000;
  std::function<int64_t()> now_ms;  // a monotonic clock (default: steady_clock)
};

// RFC 9113 §7 error codes the callers use (RST_STREAM, GOAWAY).
inline constexpr uint32_t kH2NoError = 0x0;
inline constexpr uint32_t kH2InternalError = 0x2;
inline constexpr uint32_t kH2Cancel = 0x8;

// How a stream's request body is taken, decided from its head.
struct H2BodyPlan {
  enum class Mode {
    kBuffer,  // gathered into the Request (up to max_body; 413 above it): OnRequest
    kStream,  // handed on piece by piece (OnRequestBody, OnRequestEnd); Consume() acknowledges
  } mode = Mode::kBuffer;
  uint64_t max_body = 0;  // kBuffer: 0 = no limit
};

// Why a stream ended (OnStreamClosed).
enum class H2StreamEnd {
  kAnswered,  // its answer went out whole
  kReset,     // reset by the client, by the session (a malformed request), or before an answer
};

// What a session reports. Calls come from inside Receive() (and PullOutput()); the handler may
// call the session's Submit*/Consume/Reset methods from them, but must not destroy it.
class H2SessionHandler {
 public:
  virtual ~H2SessionHandler() = default;
  // A stream's request head, complete and valid. `end_stream`: no body follows. A handler that
  // returns kStream may take the head's strings and headers (move from it): the session keeps
  // only its framing (content_length, expect_continue) from then on.
  virtual H2BodyPlan OnRequestHead(int32_t stream, Request& head, bool end_stream) = 0;
  // kBuffer: the whole request, body included.
  virtual void OnRequest(int32_t stream, Request request) = 0;
  // kStream: the next piece of the body (acknowledge it with Consume once forwarded), and its end.
  virtual void OnRequestBody(int32_t stream, std::string_view piece) = 0;
  virtual void OnRequestEnd(int32_t stream) = 0;
  // The request is refused with the gateway's own answer (400, 413, 431), which the handler
  // sends with SubmitResponse; the rest of its body is discarded. OnRequestHead may have come
  // before it (413 after the head) or not (431, 400 for a head that maps to no request).
  virtual void OnRequestRejected(int32_t stream, ErrorCode code, const std::string& detail) = 0;
  // The stream is gone; nothing more is reported for it and nothing can be sent on it.
  virtual void OnStreamClosed(int32_t stream, H2StreamEnd how, uint32_t error_code) = 0;
  // A streamed answer's queued bytes fell to half of what they were when BufferedBody was
  // last reported high (the client read them): a paused upstream may be resumed.
  virtual void OnResponseDrained(int32_t stream) {}
};

class H2Session {
 public:
  H2Session(H2SessionHandler* handler, H2Limits limits);
  ~H2Session();
  H2Session(const H2Session&) = delete;
  H2Session& operator=(const H2Session&) = delete;

  // The client's bytes, from the connection preface on. False when the connection is over: a
  // connection error (close_reason() says which; the GOAWAY is queued for PullOutput). One that
  // nghttp2 finds itself shows once its GOAWAY went out, so after every Receive the caller
  // pulls the output and closes once Finished(). Streams still open then get no
  // OnStreamClosed: they end with the connection.
  bool Receive(std::string_view bytes);
  // Frames to send, one piece at a time; empty when nothing is ready. The view is valid until
  // the next call. Call it while the socket's output is below a high watermark, and not
  // otherwise: a client that does not read then stops the session producing (H4, H5). The
  // OnResponseDrained of the previous call's bytes come first, inside it, never after the
  // bytes were made: a handler may queue more there, or even call PullOutput itself.
  std::string_view PullOutput();
  // Whether PullOutput has something (or may, once the client's window opens).
  bool WantsWrite() const;
  // True once the connection should close, when the output is flushed: a GOAWAY was sent or
  // received and no stream is open, or a connection error ended it.
  bool Finished() const;
  // The GOAWAY error code sent (0 = none or NO_ERROR) and why, for the log.
  uint32_t goaway_code() const;
  const std::string& close_reason() const;

  // A whole answer (fresh, replayed, the gateway's own): `fields` from H2AnswerFields, and the
  // body read from `response` (shared, never copied) when `send_body`. False when the stream
  // is gone.
  bool SubmitResponse(int32_t stream, H2Fields fields,
                      std::shared_ptr<const StoredResponse> response, bool send_body);
  // A streamed answer: its head (fields from H2StreamedAnswerFields), then its body in pieces,
  // then its end. `end_stream`: no body (HEAD, 204, 304).
  bool SubmitResponseHead(int32_t stream, H2Fields fields, bool end_stream);
  bool AppendBody(int32_t stream, std::string_view piece);
  bool EndBody(int32_t stream);
  // A streamed answer's bytes queued on the stream and not yet sent (flow control): the caller
  // pauses its upstream above a watermark, and OnResponseDrained tells when to resume.
  size_t BufferedBody(int32_t stream) const;
  // kStream: `n` bytes of the stream's body were forwarded; the client may send as many more.
  void Consume(int32_t stream, size_t n);
  // Ends a stream (RST_STREAM), e.g. a request too slow to arrive or an upstream gone mid-body.
  void ResetStream(int32_t stream, uint32_t error_code);
  // H6: GOAWAY naming the last stream taken; later streams were never started and may be
  // retried. Open streams go on; Finished() once they are done.
  void StartGracefulShutdown();
  // Ends the connection now with GOAWAY(`error_code`).
  void Terminate(uint32_t error_code, std::string reason);

  size_t open_streams() const;

  struct Impl;  // h2_session_impl.h (its nghttp2 callbacks reach it)

 private:
  std::unique_ptr<Impl> impl_;
};

// Whether `bytes` (what a plain listener has read so far) begin the HTTP/2 connection preface:
// kYes when all 24 bytes match, kMaybe when the bytes so far match its beginning.
enum class H2Preface { kNo, kMaybe, kYes };
H2Preface MatchH2Preface(std::string_view bytes);

}  // namespace idemgate
