// SPDX-License-Identifier: Apache-2.0
// llhttp wrapper: bytes in, Request/Response out, with the gateway's limits. Knows no sockets.
// llhttp stays inside http_parser.cc.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "proxy/http/http_message.h"

namespace idemgate {

enum class ParseError {
  kNone,
  kMalformed,       // bad HTTP, or a smuggling shape (CL+TE, differing CLs, bad chunk size...)
  kBodyTooLarge,    // body over the configured maximum
  kHeadersTooLarge, // request line / status line + headers over the configured maximum
};

// Receives a streamed message's decoded body, piece by piece (passthrough relaying).
using BodySink = std::function<void(std::string_view piece)>;

// Parses requests one at a time from a client byte stream (pipelining: Feed stops at the end
// of each message, so the bytes after it stay with the caller).
class RequestParser {
 public:
  RequestParser(uint64_t max_body, uint64_t max_header_bytes);
  ~RequestParser();
  RequestParser(const RequestParser&) = delete;
  RequestParser& operator=(const RequestParser&) = delete;

  // Consumes bytes up to the end of the current message at most; returns how many it used.
  // After an error it consumes nothing more.
  size_t Feed(const char* data, size_t len);

  bool started() const;            // a byte of the current message has been seen
  bool headers_complete() const;   // request line and headers parsed (request() has them)
  bool message_complete() const;   // a whole request is ready
  ParseError error() const;
  bool error_free() const { return error() == ParseError::kNone; }
  const std::string& error_detail() const;  // one sentence for a person

  const Request& request() const;  // valid from headers_complete()
  Request& mutable_request();      // the same, to add to before it is relayed

  // Body decided per request: Feed stops right after each header section (headers_complete()
  // and !body_decided()) until DecideBody says how the body is taken; the Content-Length check
  // against the body limit waits until then. Off by default (the limit given at construction).
  void set_decide_body(bool on);
  bool body_decided() const;
  // The body limit for this request (0 = none) and, when `sink` is set, where its pieces go
  // instead of request().body. False (error() set) when the Content-Length is over the limit.
  bool DecideBody(uint64_t max_body, BodySink sink);
  // Moves the complete request out and resets for the next message on the same stream.
  Request TakeRequest();
  // The same for a request that was used in place (relayed): it is dropped, and its header
  // list's room kept for the next request's headers (no allocation per request).
  void DropRequest();

 private:
  void NextRequest();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Parses one upstream response at a time. 1xx interim responses are skipped (not returned).
class ResponseParser {
 public:
  explicit ResponseParser(uint64_t max_body, uint64_t max_header_bytes = 64 << 10);
  ~ResponseParser();
  ResponseParser(const ResponseParser&) = delete;
  ResponseParser& operator=(const ResponseParser&) = delete;

  // Call before each response; a HEAD request's response has no body. With a `sink` the response
  // is streamed: Feed stops right after the header section (TakeHead then gives it) and the
  // body's pieces go to the sink instead of the response's body.
  void Begin(bool head_request, BodySink sink = nullptr);
  size_t Feed(const char* data, size_t len);
  // The upstream closed the connection: completes a close-delimited body, or fails.
  void FeedEof();

  bool started() const;  // a byte of the (final) response has been seen
  bool headers_complete() const;  // of the final response (a skipped 1xx does not count)
  bool message_complete() const;
  ParseError error() const;
  bool error_free() const { return error() == ParseError::kNone; }
  const std::string& error_detail() const;
  Response TakeResponse();
  // Streamed: the status line and headers (body empty, framing set), once headers_complete().
  Response TakeHead();
  // A taken head's header list, once its names and values were used: its room (and its longer
  // values' room) holds the next response's headers (a streamed response's list is then never
  // allocated again).
  void GiveBackHeaders(Headers&& headers);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace idemgate
