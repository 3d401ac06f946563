// SPDX-License-Identifier: Apache-2.0
// The llhttp glue behind RequestParser and ResponseParser (http_parser.h): the parsing state
// both directions share, llhttp's callbacks into it, the limits and the smuggling checks on
// framing. Internal to http/.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "llhttp.h"
#include "proxy/http/header_scan.h"
#include "proxy/http/http_parser.h"

namespace idemgate::parser_internal {

// The parsing state shared by both directions; llhttp calls back into it through `data`.
struct Engine {
  static constexpr size_t kHeadersReserved = 16;
  // Header values too long for a string's own room (Date, Content-Type, User-Agent) each took an
  // allocation per message: the strings of the last message's values are kept for the next, up
  // to this many of up to this size (a few KiB per connection at most).
  static constexpr size_t kSpareValues = 16;
  static constexpr size_t kSpareValueBytes = 256;

  Engine(llhttp_type_t type, uint64_t max_body, uint64_t max_header_bytes)
      : type(type),
        max_body(max_body),
        default_max_body(max_body),
        max_header_bytes(max_header_bytes) {
    InitSettings();
    spare_values.reserve(kSpareValues);
    Reinit();
  }
  // Keeps the room of `list`'s longer values for the values still to come.
  void KeepSpareValues(Headers& list) {
    constexpr size_t kInPlace = std::string().capacity();
    for (Header& h : list) {
      if (spare_values.size() == kSpareValues) return;
      const size_t room = h.value.capacity();
      if (room > kInPlace && room <= kSpareValueBytes) spare_values.push_back(std::move(h.value));
    }
  }

  void InitSettings();
  void Reinit() {
    llhttp_init(&parser, type, &settings);
    parser.data = this;
    ResetMessage();
    error = ParseError::kNone;
    detail.clear();
  }
  // Forgets the current message (not the stream position).
  void ResetMessage() {
    started = headers_complete = message_complete = false;
    interim = in_trailers = feed_pause = false;
    chunk_data_left = 0;
    chunk_crlf_left = 0;
    body_seen = 0;
    released = false;
    framing_length = -1;
    framing_chunked = false;
    head_keep_alive = false;
    if (type == HTTP_REQUEST) {  // a response's sink and limit hold for the whole call (Begin)
      max_body = default_max_body;
      sink = nullptr;
    }
    ++resets;
    header_bytes = 0;
    field.clear();
    value.clear();
    method.clear();
    target.clear();
    reason.clear();
    KeepSpareValues(headers);
    headers.clear();
    // Each message's list is moved out whole (TakeHead, TakeResponse, the request's Sync):
    // room for a typical header section at once, rather than regrowing it header by header.
    if (headers.capacity() < kHeadersReserved) headers.reserve(kHeadersReserved);
    body.clear();
    scanner.Reset();
  }
  int Fail(ParseError kind, std::string text) {
    if (error == ParseError::kNone) {
      error = kind;
      detail = std::move(text);
    }
    return -1;
  }
  // A request whose Content-Length is over max_body (checked at its headers, or when its body
  // is decided).
  int FailContentLength(uint64_t length) {
    return Fail(ParseError::kBodyTooLarge, "The Content-Length " + std::to_string(length) +
                                               " exceeds the limit of " + std::to_string(max_body) +
                                               " bytes.");
  }
  // Raw bytes of the header section and trailers that may still go to llhttp.
  uint64_t HeaderAllowance() const {
    return header_bytes >= max_header_bytes ? 0 : max_header_bytes - header_bytes;
  }
  void FailHeadersTooLarge() {
    Fail(ParseError::kHeadersTooLarge,
         std::string(type == HTTP_REQUEST ? "The request line and headers"
                                          : "The upstream's status line and headers") +
             " exceed the limit of " + std::to_string(max_header_bytes) + " bytes.");
  }
  int PushHeader();
  int OnHeadersComplete();
  int OnRequestHeadersComplete();
  int CheckRequestHost();
  int OnResponseHeadersComplete();
  int OnMessageComplete();
  size_t Feed(const char* data, size_t len);
  size_t CheckChunkEnd(const char* data, size_t len);
  size_t Execute(const char* data, size_t len);
  void FailFromLlhttp(llhttp_errno_t err);

  llhttp_type_t type;
  uint64_t max_body;
  uint64_t default_max_body;
  uint64_t max_header_bytes;
  // Streaming: Feed holds after a header section until `released`; the body goes to `sink`.
  bool hold_at_headers = false;
  bool released = false;
  BodySink sink;
  uint64_t body_seen = 0;       // decoded body bytes so far (the limit counts these)
  int64_t framing_length = -1;  // the Content-Length at the end of the headers; -1: none
  bool framing_chunked = false;
  bool head_keep_alive = false;
  llhttp_t parser{};
  llhttp_settings_t settings{};

  bool head_request = false;  // responses: the request was HEAD
  bool started = false;
  bool headers_complete = false;
  bool message_complete = false;
  bool interim = false;          // responses: the current message is a 1xx to skip
  bool in_trailers = false;      // past the last chunk: the bytes count against the header limit
  bool feed_pause = false;       // llhttp paused (chunk-size line, skipped 1xx) for Feed to act
  uint64_t chunk_data_left = 0;  // bytes of the current chunk's data not yet seen by Feed
  int chunk_crlf_left = 0;       // bytes of the CRLF after the chunk's data still to check
  uint64_t resets = 0;           // ResetMessage calls (a skipped 1xx resets inside Execute)
  bool keep_alive = false;
  ParseError error = ParseError::kNone;
  std::string detail;

  HeaderSectionScanner scanner;
  uint64_t header_bytes = 0;
  std::string field;
  std::string value;
  std::string method;
  std::string target;
  std::string reason;
  Headers headers;
  std::vector<std::string> spare_values;  // see kSpareValues
  std::string body;
};

}  // namespace idemgate::parser_internal
