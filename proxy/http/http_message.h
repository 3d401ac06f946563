// SPDX-License-Identifier: Apache-2.0
// Request/Response value types and their serialization. Knows no sockets and no parser.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "store/record.h"

namespace idemgate {

struct Header {
  std::string name;  // as sent
  std::string value;
};
using Headers = std::vector<Header>;

// `text` without leading and trailing spaces and tabs (HTTP's optional white space).
std::string_view TrimOws(std::string_view text);

// Case-insensitive ASCII comparison of header names.
bool HeaderNameEquals(std::string_view a, std::string_view b);
// The first header with this name, or nullptr.
const std::string* FindHeader(const Headers& headers, std::string_view name);
int CountHeader(const Headers& headers, std::string_view name);
// The first header with this name (nullptr when none), and in `count` how many there are: one
// pass where FindHeader and CountHeader take two.
const std::string* FindHeaderCounted(const Headers& headers, std::string_view name, int* count);

// The standard reason phrase for a status ("Created"), or "Unknown" when there is none.
std::string_view StandardReasonPhrase(int status);

// The names a message's Connection headers list, parsed once per message. Up to four are
// compared one by one; more are sorted without regard to case, without duplicates, so each
// lookup is a binary search (a Connection header of 12,000 tokens on a message of 9,000 headers
// costs one pass, not one pass per header).
// It points into `message_headers`, which must outlive it unchanged.
class ConnectionTokens {
 public:
  explicit ConnectionTokens(const Headers& message_headers);
  bool Lists(std::string_view name) const;  // case-insensitive
  bool empty() const { return count_ == 0; }

 private:
  // A message lists one or two tokens ("keep-alive", "close"): those stay in `few_` (one per
  // message allocated otherwise); `many_` only past that.
  static constexpr size_t kFew = 4;
  void Add(std::string_view token);
  std::string_view* data() { return many_.empty() ? few_.data() : many_.data(); }
  const std::string_view* data() const { return many_.empty() ? few_.data() : many_.data(); }
  std::array<std::string_view, kFew> few_{};
  std::vector<std::string_view> many_;
  size_t count_ = 0;
};

// Connection tokens parsed so far by this thread (every ConnectionTokens counts its own): lets a
// test check that the work stays linear in the message's size, without timing it.
uint64_t ConnectionTokensParsedForTest();

// Connection, Keep-Alive, Transfer-Encoding, TE, Trailer, Upgrade, Proxy-*, and every name the
// message's own Connection header lists.
bool IsHopByHop(std::string_view name, const ConnectionTokens& listed);
// The same, parsing `message_headers`' Connection tokens on each call: for a single name only.
bool IsHopByHop(std::string_view name, const Headers& message_headers);

// The authority of an absolute-form request-target ("http://user@Pay.Example:8080/x" ->
// "user@Pay.Example:8080"); empty for the origin form ("/x"), "*" and anything else.
std::string_view TargetAuthority(std::string_view target);

// A Host value or an authority reduced to the host name routes compare: userinfo and port
// dropped, ASCII lower-cased, one trailing dot removed ("PAY.example.:443" -> "pay.example",
// the same DNS name), "[::1]:80" -> "[::1]".
std::string NormalizeHost(std::string_view host_or_authority);

struct Request {
  std::string method;  // as sent, e.g. "POST"
  std::string target;  // request-target exactly as sent (path and query)
  int http_major = 1;
  int http_minor = 1;
  Headers headers;
  std::string body;              // after transfer decoding
  bool keep_alive = true;        // the client wants the connection kept open after this one
  bool expect_continue = false;  // "Expect: 100-continue"
  bool chunked = false;          // the body came chunked
  int64_t content_length = -1;   // the Content-Length it came with; -1 without one

  std::string_view Path() const;  // target up to '?'
};

struct Response {
  int status = 0;
  std::string reason;
  int http_minor = 1;
  Headers headers;         // as received, hop-by-hop included
  std::string body;        // after transfer decoding
  bool keep_alive = true;  // the connection it came on may be reused
  // Framing as received (a streamed response's head carries it on to the client).
  bool chunked = false;
  int64_t content_length = -1;  // -1: no Content-Length
};

// The request as sent upstream: hop-by-hop headers removed, Content-Length framing,
// X-Forwarded-For (appended) and X-Forwarded-Proto added; Host and everything else as sent.
// A request without Host (HTTP/1.0 allows that; it goes out as HTTP/1.1, which does not) gets
// `default_host`, the upstream's host[:port], when that is not empty. A non-empty
// `host_override` (upstream.host) replaces the client's Host. A client's Idempotency-Attempt
// and Idempotency-Record are never forwarded (SPEC §12 A1); `extra_headers` (whole header
// lines, each ending in CRLF: the gateway's own fencing headers) are added.
std::string SerializeUpstreamRequest(const Request& request, std::string_view client_ip,
                                     std::string_view proto, std::string_view default_host = {},
                                     std::string_view host_override = {},
                                     std::string_view extra_headers = {});

// How a streamed body is framed on the wire (passthrough relaying).
enum class BodyFraming {
  kNone,     // no body
  kLength,   // Content-Length
  kChunked,  // Transfer-Encoding: chunked (each piece relayed becomes one chunk)
  kClose,    // delimited by closing the connection (an HTTP/1.0 client)
};

// The head of a streamed (passthrough) request: as SerializeUpstreamRequest, framed as it came
// (Content-Length kept, chunked kept chunked; a body-carrying method without a body gets
// Content-Length: 0). Its body follows as relayed.
std::string SerializeUpstreamRequestHead(const Request& request, std::string_view client_ip,
                                         std::string_view proto, std::string_view default_host = {},
                                         std::string_view host_override = {});

// Whether an upstream answer is stored (and replayed) or only relayed (passthrough).
enum class AnswerUse { kStored, kRelayed };

// Turns an upstream response into what is stored and replayed: hop-by-hop headers,
// X-Request-Id (every answer carries its own request's), Content-Length and, when stored, Age
// (R6) dropped, everything else in order, byte for byte. The answer to a HEAD keeps the
// upstream's Content-Length: it gives the size of a body that is not sent, which the gateway
// cannot recompute.
StoredResponse ToStoredResponse(const Response& response, bool head_request,
                                AnswerUse use = AnswerUse::kStored);
// The same, moving the kept headers and the body out of `response` instead of copying them.
StoredResponse ToStoredResponse(Response&& response, bool head_request,
                                AnswerUse use = AnswerUse::kStored);
// The same, copied into `*into`, whose room is reused (a relay's, answer after answer).
void ToStoredResponse(const Response& response, bool head_request, AnswerUse use,
                      StoredResponse* into);

// The Connection header of an answer: none (HTTP/1.1 keeps the connection by default), close,
// or keep-alive (an HTTP/1.0 client that asked for it must be told it was granted).
enum class ConnectionHeader { kNone, kClose, kKeepAlive };

// The bytes sent to the client: status line, the stored headers, X-Request-Id (this request's,
// in place of any stored one) unless `request_id` is empty, Idempotent-Replayed when `replayed`,
// Content-Length, then `connection`. A HEAD request, 1xx, 204 and 304 get no body (for HEAD the
// Content-Length still tells the body's size).
std::string SerializeResponse(const StoredResponse& response, bool replayed,
                              ConnectionHeader connection, bool head_request,
                              std::string_view request_id = {});
// The same bytes up to and including the blank line; *send_body tells whether response.body
// follows them (so a caller can send the body without copying it).
// `extra_headers`: ready header lines of this answer only, sent after Idempotent-Replayed.
std::string SerializeResponseHead(const StoredResponse& response, bool replayed,
                                  ConnectionHeader connection, bool head_request, bool* send_body,
                                  std::string_view extra_headers = {},
                                  std::string_view request_id = {});

// The head of a streamed (passthrough) answer: status line, `response`'s headers (from
// ToStoredResponse; its body is ignored), X-Request-Id unless `request_id` is empty, then the
// framing (`length` for kLength) and `connection`, appended to `out` (a buffer its caller reuses
// from answer to answer).
void AppendStreamedResponseHead(std::string* out, const StoredResponse& response,
                                BodyFraming framing, int64_t length, ConnectionHeader connection,
                                std::string_view request_id = {});

}  // namespace idemgate
