// SPDX-License-Identifier: Apache-2.0
// Header lists as HTTP/2 carries them (SPEC §14 H3): the fields of an answer sent on a stream
// (lower-case names, the connection-specific headers HTTP/2 forbids left out), and the request
// head an HTTP/2 stream maps to (`:authority` as Host, `:path` as the target). Pure: no nghttp2.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "proxy/http/error_types.h"
#include "proxy/http/http_message.h"
#include "store/record.h"

namespace idemgate {

struct H2Field {
  std::string name;  // lower case
  std::string value;
  bool operator==(const H2Field&) const = default;
};
using H2Fields = std::vector<H2Field>;

// H3: Connection and every name it lists, Keep-Alive, Proxy-Connection, Transfer-Encoding,
// Upgrade (and TE, hop-by-hop in HTTP/1.1 and meaningless in an answer): never on an HTTP/2
// answer. `listed` is the message's own Connection tokens.
bool IsForbiddenInH2(std::string_view name, const ConnectionTokens& listed);

// An answer's fields, as SerializeResponseHead gives them over HTTP/1.1: `:status`, the stored
// headers (lower-cased, H3's forbidden ones left out, X-Request-Id replaced by `request_id` when
// it is not empty), Idempotent-Replayed when `replayed`, `extra_headers` (ready lines
// "Name: value\r\n"), then content-length. *send_body tells whether response.body follows
// (not for HEAD, 1xx, 204, 304, or an empty body).
H2Fields H2AnswerFields(const StoredResponse& response, bool replayed,
                        std::string_view extra_headers, bool head_request,
                        std::string_view request_id, bool* send_body);

// A streamed (passthrough) answer's fields: `:status`, `head`'s headers as above, X-Request-Id,
// and content-length when `length` >= 0 (the upstream's framing; -1: none, DATA until
// END_STREAM).
H2Fields H2StreamedAnswerFields(const StoredResponse& head, int64_t length,
                                std::string_view request_id);

// The bytes a request field counts for against limits.max_header_bytes: its share of the same
// request's HTTP/1.1 head (request line, "Name: value\r\n"), so one limit holds for both.
uint64_t H1EquivalentFieldBytes(std::string_view name, std::string_view value);

// Gathers one stream's request header list (as nghttp2 validated it: pseudo-headers first and
// well-formed, no connection-specific field) into our Request: `:method`, `:path` as the target,
// `:authority` as a Host header in first place, cookie crumbs joined (RFC 9113 §8.2.3).
class H2RequestBuilder {
 public:
  // Past `max_header_bytes` the request gets 431; past `bomb_bytes` Add refuses (GOAWAY).
  H2RequestBuilder(uint64_t max_header_bytes, uint64_t bomb_bytes);
  [[nodiscard]] bool Add(std::string_view name, std::string_view value);
  bool over_limit() const { return bytes_ > max_header_bytes_; }
  // The request, or false with the gateway's answer: 431 over the limit; 400 for CONNECT or a
  // Host that names another host than :authority.
  bool Finish(Request* out, ErrorCode* code, std::string* detail);

 private:
  uint64_t max_header_bytes_;
  uint64_t bomb_bytes_;
  uint64_t bytes_ = 2;  // the blank line that ends an HTTP/1.1 head
  Request request_;
  std::string authority_;
  bool has_authority_ = false;
  std::string cookie_;
  bool has_cookie_ = false;
};

}  // namespace idemgate
