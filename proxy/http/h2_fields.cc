// SPDX-License-Identifier: Apache-2.0
// HTTP/2 header lists: an answer's fields (H3) and a request field's HTTP/1.1-equivalent size.
#include "proxy/http/h2_fields.h"

#include <cctype>

namespace idemgate {
namespace {

std::string Lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// The Connection headers of a stored answer, as a Headers list ConnectionTokens can read.
Headers ConnectionHeaders(const StoredResponse& response) {
  Headers out;
  for (const auto& [name, value] : response.headers) {
    if (HeaderNameEquals(name, "Connection")) out.push_back({name, value});
  }
  return out;
}

// `:status`, then the stored headers H3 lets through (X-Request-Id replaced when `request_id`
// is set), then X-Request-Id.
H2Fields StatusAndHeaders(const StoredResponse& response, std::string_view request_id) {
  H2Fields fields;
  fields.reserve(response.headers.size() + 4);
  fields.push_back({":status", std::to_string(response.status)});
  const Headers connection = ConnectionHeaders(response);
  const ConnectionTokens listed(connection);
  for (const auto& [name, value] : response.headers) {
    if (IsForbiddenInH2(name, listed)) continue;
    if (!request_id.empty() && HeaderNameEquals(name, "X-Request-Id")) continue;
    fields.push_back({Lower(name), value});
  }
  if (!request_id.empty()) fields.push_back({"x-request-id", std::string(request_id)});
  return fields;
}

// Ready header lines "Name: value\r\n" (an answer's extra headers) as fields.
void AppendLines(std::string_view lines, H2Fields* fields) {
  while (!lines.empty()) {
    size_t end = lines.find("\r\n");
    std::string_view line = lines.substr(0, end);
    lines.remove_prefix(end == std::string_view::npos ? lines.size() : end + 2);
    size_t colon = line.find(':');
    if (colon == std::string_view::npos || colon == 0) continue;
    fields->push_back({Lower(line.substr(0, colon)), std::string(TrimOws(line.substr(colon + 1)))});
  }
}

}  // namespace

bool IsForbiddenInH2(std::string_view name, const ConnectionTokens& listed) {
  for (std::string_view forbidden :
       {"Connection", "Keep-Alive", "Proxy-Connection", "Transfer-Encoding", "Upgrade", "TE"}) {
    if (HeaderNameEquals(name, forbidden)) return true;
  }
  return listed.Lists(name);
}

H2Fields H2AnswerFields(const StoredResponse& response, bool replayed,
                        std::string_view extra_headers, bool head_request,
                        std::string_view request_id, bool* send_body) {
  H2Fields fields = StatusAndHeaders(response, request_id);
  if (replayed) fields.push_back({"idempotent-replayed", "true"});
  AppendLines(extra_headers, &fields);
  const bool no_body_status = (response.status >= 100 && response.status < 200) ||
                              response.status == 204 || response.status == 304;
  // As over HTTP/1.1: a HEAD answer with an empty stored body claims no size.
  if (!no_body_status && !(head_request && response.body.empty())) {
    // A HEAD answer keeps the upstream's content-length among its stored headers.
    bool has_length = false;
    for (const H2Field& f : fields) has_length = has_length || f.name == "content-length";
    if (!has_length) fields.push_back({"content-length", std::to_string(response.body.size())});
  }
  *send_body = !no_body_status && !head_request && !response.body.empty();
  return fields;
}

H2Fields H2StreamedAnswerFields(const StoredResponse& head, int64_t length,
                                std::string_view request_id) {
  H2Fields fields = StatusAndHeaders(head, request_id);
  if (length >= 0) fields.push_back({"content-length", std::to_string(length)});
  return fields;
}

uint64_t H1EquivalentFieldBytes(std::string_view name, std::string_view value) {
  // "METHOD SP target SP HTTP/1.1 CRLF", "Host: value CRLF", "name: value CRLF".
  if (name == ":method") return value.size() + 1;
  if (name == ":path") return value.size() + 11;
  if (name == ":authority") return value.size() + 8;
  if (!name.empty() && name.front() == ':') return 0;
  return name.size() + value.size() + 4;
}

H2RequestBuilder::H2RequestBuilder(uint64_t max_header_bytes, uint64_t bomb_bytes)
    : max_header_bytes_(max_header_bytes), bomb_bytes_(bomb_bytes) {
  request_.http_major = 2;
  request_.http_minor = 0;
  request_.headers.reserve(16);  // one allocation for a usual head, not one per doubling
}

bool H2RequestBuilder::Add(std::string_view name, std::string_view value) {
  bytes_ += H1EquivalentFieldBytes(name, value);
  if (bytes_ > bomb_bytes_) return false;
  if (over_limit()) return true;  // counted, not kept: the request gets 431
  if (name == ":method") {
    request_.method.assign(value);
  } else if (name == ":path") {
    request_.target.assign(value);
  } else if (name == ":authority") {
    authority_.assign(value);
    has_authority_ = true;
  } else if (name == "cookie") {
    if (has_cookie_) cookie_.append("; ");
    cookie_.append(value);
    has_cookie_ = true;
  } else if (!name.empty() && name.front() != ':') {
    request_.headers.push_back({std::string(name), std::string(value)});
    if (name == "content-length") {
      // nghttp2 checked it is one number; it frames the body against the DATA received.
      int64_t length = 0;
      for (char c : value) length = length * 10 + (c - '0');
      request_.content_length = length;
    }
    if (name == "expect" && HeaderNameEquals(TrimOws(value), "100-continue")) {
      request_.expect_continue = true;
    }
  }
  return true;
}

bool H2RequestBuilder::Finish(Request* out, ErrorCode* code, std::string* detail) {
  if (over_limit()) {
    *code = ErrorCode::kHeadersTooLarge;
    *detail = "The request's header list is over the limit of " +
              std::to_string(max_header_bytes_) + " bytes.";
    return false;
  }
  *code = ErrorCode::kBadRequest;
  if (request_.method == "CONNECT") {
    *detail = "CONNECT is not supported: the gateway does not tunnel.";
    return false;
  }
  const int hosts = CountHeader(request_.headers, "Host");
  if (hosts > 1) {
    *detail = "The request carries more than one Host header.";
    return false;
  }
  if (has_authority_) {
    const std::string* host = FindHeader(request_.headers, "Host");
    if (host != nullptr && !HeaderNameEquals(TrimOws(*host), authority_)) {
      *detail = "The Host header names another host than :authority.";
      return false;
    }
    std::erase_if(request_.headers, [](const Header& h) { return h.name == "host"; });
    request_.headers.insert(request_.headers.begin(), Header{"host", authority_});
  }
  if (has_cookie_) request_.headers.push_back({"cookie", std::move(cookie_)});
  *out = std::move(request_);
  return true;
}

}  // namespace idemgate
