// SPDX-License-Identifier: Apache-2.0
// Request/Response helpers: header lookup, hop-by-hop rules, and the bytes sent up and down.
#include "proxy/http/http_message.h"

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <utility>

namespace idemgate {

std::string_view TrimOws(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
  return text;
}

namespace {

char LowerAscii(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; }

bool StartsWithNoCase(std::string_view text, std::string_view prefix) {
  return text.size() >= prefix.size() && HeaderNameEquals(text.substr(0, prefix.size()), prefix);
}

thread_local uint64_t connection_tokens_parsed = 0;

// Orders names case-insensitively (ASCII), byte by byte after lower-casing.
bool NameLess(std::string_view a, std::string_view b) {
  size_t n = a.size() < b.size() ? a.size() : b.size();
  for (size_t i = 0; i < n; ++i) {
    unsigned char x = static_cast<unsigned char>(LowerAscii(a[i]));
    unsigned char y = static_cast<unsigned char>(LowerAscii(b[i]));
    if (x != y) return x < y;
  }
  return a.size() < b.size();
}

bool MethodCarriesBody(std::string_view method) {
  return method == "POST" || method == "PUT" || method == "PATCH";
}

// "name: value\r\n", grown once and copied in place (every header of every message sent).
void AppendHeader(std::string* out, std::string_view name, std::string_view value) {
  const size_t at = out->size();
  out->resize(at + name.size() + value.size() + 4);
  char* p = out->data() + at;
  memcpy(p, name.data(), name.size());
  p += name.size();
  *p++ = ':';
  *p++ = ' ';
  memcpy(p, value.data(), value.size());
  p += value.size();
  *p++ = '\r';
  *p = '\n';
}

}  // namespace

ConnectionTokens::ConnectionTokens(const Headers& message_headers) {
  for (const Header& h : message_headers) {
    if (!HeaderNameEquals(h.name, "Connection")) continue;
    std::string_view rest = h.value;
    while (!rest.empty()) {
      size_t comma = rest.find(',');
      std::string_view token = TrimOws(rest.substr(0, comma));
      if (!token.empty()) {
        ++connection_tokens_parsed;
        Add(token);
      }
      if (comma == std::string_view::npos) break;
      rest.remove_prefix(comma + 1);
    }
  }
  if (count_ <= kFew) return;  // Lists compares a few one by one
  std::sort(data(), data() + count_, NameLess);
  count_ = static_cast<size_t>(std::unique(data(), data() + count_, HeaderNameEquals) - data());
}

void ConnectionTokens::Add(std::string_view token) {
  if (many_.empty() && count_ < kFew) {
    few_[count_++] = token;
    return;
  }
  if (many_.empty()) many_.assign(few_.begin(), few_.end());
  many_.push_back(token);
  ++count_;
}

bool ConnectionTokens::Lists(std::string_view name) const {
  if (count_ == 0) return false;  // most messages list nothing: no search
  const std::string_view* end = data() + count_;
  // A few ("keep-alive", "close"), unsorted: one by one, where a name of another length fails
  // at once.
  if (count_ <= kFew) {
    return std::any_of(data(), end,
                       [name](std::string_view token) { return HeaderNameEquals(token, name); });
  }
  const std::string_view* it = std::lower_bound(data(), end, name, NameLess);
  return it != end && HeaderNameEquals(*it, name);
}

uint64_t ConnectionTokensParsedForTest() { return connection_tokens_parsed; }

bool HeaderNameEquals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (LowerAscii(a[i]) != LowerAscii(b[i])) return false;
  }
  return true;
}

const std::string* FindHeader(const Headers& headers, std::string_view name) {
  for (const Header& h : headers) {
    if (HeaderNameEquals(h.name, name)) return &h.value;
  }
  return nullptr;
}

const std::string* FindHeaderCounted(const Headers& headers, std::string_view name, int* count) {
  const std::string* first = nullptr;
  *count = 0;
  for (const Header& h : headers) {
    if (!HeaderNameEquals(h.name, name)) continue;
    if (first == nullptr) first = &h.value;
    ++*count;
  }
  return first;
}

int CountHeader(const Headers& headers, std::string_view name) {
  int count = 0;
  FindHeaderCounted(headers, name, &count);
  return count;
}

std::string_view StandardReasonPhrase(int status) {
  switch (status) {
    case 100: return "Continue";
    case 101: return "Switching Protocols";
    case 102: return "Processing";
    case 103: return "Early Hints";
    case 200: return "OK";
    case 201: return "Created";
    case 202: return "Accepted";
    case 203: return "Non-Authoritative Information";
    case 204: return "No Content";
    case 205: return "Reset Content";
    case 206: return "Partial Content";
    case 300: return "Multiple Choices";
    case 301: return "Moved Permanently";
    case 302: return "Found";
    case 303: return "See Other";
    case 304: return "Not Modified";
    case 307: return "Temporary Redirect";
    case 308: return "Permanent Redirect";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 402: return "Payment Required";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 406: return "Not Acceptable";
    case 408: return "Request Timeout";
    case 409: return "Conflict";
    case 410: return "Gone";
    case 411: return "Length Required";
    case 412: return "Precondition Failed";
    case 413: return "Payload Too Large";
    case 414: return "URI Too Long";
    case 415: return "Unsupported Media Type";
    case 422: return "Unprocessable Entity";
    case 425: return "Too Early";
    case 428: return "Precondition Required";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 502: return "Bad Gateway";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    default: return "Unknown";
  }
}

bool IsHopByHop(std::string_view name, const ConnectionTokens& listed) {
  // Connection, Keep-Alive, Transfer-Encoding, TE, Trailer, Upgrade: only a name of one of their
  // lengths is compared (every header of every message passes here).
  switch (name.size()) {
    case 2:
      if (HeaderNameEquals(name, "TE")) return true;
      break;
    case 7:
      if (HeaderNameEquals(name, "Trailer") || HeaderNameEquals(name, "Upgrade")) return true;
      break;
    case 10:
      if (HeaderNameEquals(name, "Connection") || HeaderNameEquals(name, "Keep-Alive")) {
        return true;
      }
      break;
    case 17:
      if (HeaderNameEquals(name, "Transfer-Encoding")) return true;
      break;
    default:
      break;
  }
  if (StartsWithNoCase(name, "Proxy-")) return true;
  return listed.Lists(name);
}

bool IsHopByHop(std::string_view name, const Headers& message_headers) {
  return IsHopByHop(name, ConnectionTokens(message_headers));
}

std::string_view TargetAuthority(std::string_view target) {
  if (target.empty() || target.front() == '/') return {};
  const size_t sep = target.find("://");
  if (sep == std::string_view::npos || sep == 0 || target.find_first_of("/?#") < sep) return {};
  std::string_view rest = target.substr(sep + 3);
  return rest.substr(0, rest.find_first_of("/?#"));
}

std::string NormalizeHost(std::string_view host_or_authority) {
  std::string_view host = TrimOws(host_or_authority);
  const size_t at = host.rfind('@');
  if (at != std::string_view::npos) host.remove_prefix(at + 1);
  const size_t bracket = host.rfind(']');
  const size_t colon = host.rfind(':');
  if (colon != std::string_view::npos && (bracket == std::string_view::npos || colon > bracket)) {
    host = host.substr(0, colon);
  }
  if (host.size() > 1 && host.back() == '.') host.remove_suffix(1);
  std::string out(host);
  for (char& c : out) c = LowerAscii(c);
  return out;
}

std::string_view Request::Path() const {
  std::string_view t = target;
  size_t q = t.find('?');
  return q == std::string_view::npos ? t : t.substr(0, q);
}

namespace {

// A body up to this size that came with its head is sent in the same buffer.
constexpr int64_t kSmallBody = 16 << 10;

// The request line and headers sent upstream, without the framing header and the blank line.
void AppendUpstreamHead(std::string& out, const Request& request, std::string_view client_ip,
                        std::string_view proto, std::string_view default_host,
                        std::string_view host_override) {
  out.append(request.method).append(" ").append(request.target).append(" HTTP/1.1\r\n");
  std::string forwarded_for;
  bool has_host = false;
  const ConnectionTokens listed(request.headers);
  for (const Header& h : request.headers) {
    if (IsHopByHop(h.name, listed)) continue;
    if (!host_override.empty() && HeaderNameEquals(h.name, "Host")) continue;
    has_host = has_host || HeaderNameEquals(h.name, "Host");
    if (HeaderNameEquals(h.name, "Content-Length")) continue;
    // The gateway already answered (or skipped) the 100-continue handshake; the body is whole.
    if (HeaderNameEquals(h.name, "Expect")) continue;
    // The gateway states the protocol it received; a client-sent value could be spoofed.
    if (HeaderNameEquals(h.name, "X-Forwarded-Proto")) continue;
    // SPEC §12 A1: the fencing token is the gateway's; a client cannot forge one.
    if (HeaderNameEquals(h.name, "Idempotency-Attempt") ||
        HeaderNameEquals(h.name, "Idempotency-Record")) {
      continue;
    }
    if (HeaderNameEquals(h.name, "X-Forwarded-For")) {
      if (!forwarded_for.empty()) forwarded_for.append(", ");
      forwarded_for.append(h.value);
      continue;
    }
    AppendHeader(&out, h.name, h.value);
  }
  if (!host_override.empty()) {
    AppendHeader(&out, "Host", host_override);
  } else if (!has_host && !default_host.empty()) {
    AppendHeader(&out, "Host", default_host);
  }
  if (!forwarded_for.empty()) forwarded_for.append(", ");
  forwarded_for.append(client_ip);
  AppendHeader(&out, "X-Forwarded-For", forwarded_for);
  AppendHeader(&out, "X-Forwarded-Proto", proto);
}

}  // namespace

std::string SerializeUpstreamRequest(const Request& request, std::string_view client_ip,
                                     std::string_view proto, std::string_view default_host,
                                     std::string_view host_override,
                                     std::string_view extra_headers) {
  std::string out;
  out.reserve(256 + request.body.size());
  AppendUpstreamHead(out, request, client_ip, proto, default_host, host_override);
  out.append(extra_headers);
  if (!request.body.empty() || MethodCarriesBody(request.method)) {
    AppendHeader(&out, "Content-Length", std::to_string(request.body.size()));
  }
  out.append("\r\n");
  out.append(request.body);
  return out;
}

std::string SerializeUpstreamRequestHead(const Request& request, std::string_view client_ip,
                                         std::string_view proto, std::string_view default_host,
                                         std::string_view host_override) {
  // Room for the head as sent plus what the gateway adds, and for a small body's bytes, which
  // the relay appends when they came with the head (the buffer then goes upstream in one write).
  size_t room = request.method.size() + request.target.size() + default_host.size() +
                host_override.size() + client_ip.size() + 160;
  for (const Header& h : request.headers) room += h.name.size() + h.value.size() + 4;
  if (!request.chunked && request.content_length > 0 && request.content_length <= kSmallBody) {
    room += static_cast<size_t>(request.content_length);
  }
  std::string out;
  out.reserve(room);
  AppendUpstreamHead(out, request, client_ip, proto, default_host, host_override);
  if (request.chunked) {
    AppendHeader(&out, "Transfer-Encoding", "chunked");
  } else if (request.content_length >= 0 || MethodCarriesBody(request.method)) {
    AppendHeader(&out, "Content-Length",
                 std::to_string(std::max<int64_t>(request.content_length, 0)));
  }
  out.append("\r\n");
  return out;
}

namespace {

// Whether ToStoredResponse keeps this header of an upstream answer.
bool StoredKeeps(std::string_view name, const ConnectionTokens& listed, bool head_request,
                 AnswerUse use) {
  if (IsHopByHop(name, listed)) return false;
  switch (name.size()) {
    case 3:
      // R6: a replay's Age is the gateway's (since it stored the answer); the upstream's own is
      // not stored. A relayed answer is not stored: a cache's Age goes through as it came.
      return !(use == AnswerUse::kStored && HeaderNameEquals(name, "Age"));
    case 12:
      // Each answer carries its own request's id (an upstream echoes the one it was sent), so a
      // replay never carries the first request's.
      return !HeaderNameEquals(name, "X-Request-Id");
    case 14:
      return head_request || !HeaderNameEquals(name, "Content-Length");
    case 19:
      // The gateway's own header (R2: a first answer never carries it), even from a backend
      // that deduplicates too.
      return !HeaderNameEquals(name, "Idempotent-Replayed");
    default:
      return true;
  }
}

}  // namespace

void ToStoredResponse(const Response& response, bool head_request, AnswerUse use,
                      StoredResponse* into) {
  // Copied into the strings `into` already has: a relayed answer's own go back to its parser,
  // and neither side allocates again answer after answer.
  into->status = response.status;
  into->reason.assign(response.reason);
  const ConnectionTokens listed(response.headers);
  size_t kept = 0;
  for (const Header& h : response.headers) {
    if (!StoredKeeps(h.name, listed, head_request, use)) continue;
    if (kept == into->headers.size()) into->headers.emplace_back();
    into->headers[kept].first.assign(h.name);
    into->headers[kept].second.assign(h.value);
    ++kept;
  }
  into->headers.resize(kept);
  into->body.assign(response.body);
}

StoredResponse ToStoredResponse(const Response& response, bool head_request, AnswerUse use) {
  StoredResponse stored;
  ToStoredResponse(response, head_request, use, &stored);
  return stored;
}

StoredResponse ToStoredResponse(Response&& response, bool head_request, AnswerUse use) {
  StoredResponse stored;
  stored.status = response.status;
  stored.reason = std::move(response.reason);
  // `listed` points into the Connection headers' values, which are never kept (hop-by-hop), so
  // moving the kept ones out leaves it valid.
  const ConnectionTokens listed(response.headers);
  stored.headers.reserve(response.headers.size());
  for (Header& h : response.headers) {
    if (StoredKeeps(h.name, listed, head_request, use)) {
      stored.headers.emplace_back(std::move(h.name), std::move(h.value));
    }
  }
  stored.body = std::move(response.body);
  return stored;
}

namespace {

// An answer's status line and stored headers, then X-Request-Id (this request's, in place of any
// stored one) unless `request_id` is empty.
void AppendStatusAndHeaders(std::string* out, const StoredResponse& response,
                            std::string_view request_id) {
  out->append("HTTP/1.1 ").append(std::to_string(response.status)).append(" ");
  out->append(response.reason.empty() ? StandardReasonPhrase(response.status) : response.reason);
  out->append("\r\n");
  for (const auto& [name, value] : response.headers) {
    if (!request_id.empty() && HeaderNameEquals(name, "X-Request-Id")) continue;
    AppendHeader(out, name, value);
  }
  if (!request_id.empty()) AppendHeader(out, "X-Request-Id", request_id);
}

void AppendConnection(std::string* out, ConnectionHeader connection) {
  if (connection == ConnectionHeader::kClose) AppendHeader(out, "Connection", "close");
  if (connection == ConnectionHeader::kKeepAlive) AppendHeader(out, "Connection", "keep-alive");
}

}  // namespace

std::string SerializeResponse(const StoredResponse& response, bool replayed,
                              ConnectionHeader connection, bool head_request,
                              std::string_view request_id) {
  bool send_body = false;
  std::string out = SerializeResponseHead(response, replayed, connection, head_request, &send_body,
                                          {}, request_id);
  if (send_body) out.append(response.body);
  return out;
}

std::string SerializeResponseHead(const StoredResponse& response, bool replayed,
                                  ConnectionHeader connection, bool head_request, bool* send_body,
                                  std::string_view extra_headers, std::string_view request_id) {
  std::string out;
  out.reserve(256);
  AppendStatusAndHeaders(&out, response, request_id);
  if (replayed) AppendHeader(&out, "Idempotent-Replayed", "true");
  out.append(extra_headers);
  const bool no_body_status = (response.status >= 100 && response.status < 200) ||
                              response.status == 204 || response.status == 304;
  // HEAD: the stored body of a HEAD response is empty, and an empty body gets no Content-Length
  // (it would claim the resource is empty). A non-empty body still tells its size, unsent.
  const bool write_length = !no_body_status && !(head_request && response.body.empty());
  if (write_length) AppendHeader(&out, "Content-Length", std::to_string(response.body.size()));
  AppendConnection(&out, connection);
  out.append("\r\n");
  *send_body = !no_body_status && !head_request && !response.body.empty();
  return out;
}

void AppendStreamedResponseHead(std::string* out, const StoredResponse& response,
                                BodyFraming framing, int64_t length, ConnectionHeader connection,
                                std::string_view request_id) {
  AppendStatusAndHeaders(out, response, request_id);
  if (framing == BodyFraming::kLength) AppendHeader(out, "Content-Length", std::to_string(length));
  if (framing == BodyFraming::kChunked) AppendHeader(out, "Transfer-Encoding", "chunked");
  AppendConnection(out, connection);
  out->append("\r\n");
}

}  // namespace idemgate
