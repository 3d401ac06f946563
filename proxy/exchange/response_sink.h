// Where answers go: the one sink interface of the request path. An exchange sends its one whole
// answer (SendResponse); the passthrough relay streams one (StreamSink). The HTTP/1.1 client
// connection implements both; an HTTP/2 stream is one more kind of sink.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>

#include "store/record.h"

namespace idemgate {

// Where an exchange's one answer goes: the client connection (tests: a recorder).
class ResponseSink {
 public:
  virtual ~ResponseSink() = default;
  // The response may be shared with other answers (a cached replay): it is never modified.
  // `extra_headers`: header lines ("Name: value\r\n") of this answer only (Age, R6;
  // Preference-Applied, §10), sent after the stored ones.
  virtual void SendResponse(std::shared_ptr<const StoredResponse> response, bool replayed,
                            std::string_view extra_headers) = 0;
};

// A sink that also takes an answer as it arrives (the passthrough relay, conn/passthrough_relay.h),
// and whose request body is read while that answer streams. `request_complete` false: the
// request's body was not all read, so nothing more can follow it on this connection.
class StreamSink : public ResponseSink {
 public:
  // The answer's head (its body ignored); `length` -1: the body's length is not known ahead.
  virtual void SendHead(const StoredResponse& head, int64_t length, std::string_view request_id,
                        bool request_complete) = 0;
  virtual void SendBody(std::string_view piece) = 0;
  virtual void Flush() = 0;  // what was handed on so far goes out now
  // The last byte was handed on (`clean`), or the upstream failed in the middle of the body (the
  // client sees a cut answer).
  virtual void EndStream(bool clean, bool request_complete) = 0;
  // Nothing of the answer went out: the gateway's own error answer goes instead.
  virtual void SendError(std::shared_ptr<const StoredResponse> response, bool request_complete) = 0;
  // Stop (resume) reading the request's body: the upstream is behind.
  virtual void PauseRequestBody(bool paused) = 0;
  // The upstream caught up: read what of the body is buffered now.
  virtual void ReadRequestBody() = 0;
};

}  // namespace idemgate
