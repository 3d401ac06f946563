// SPDX-License-Identifier: Apache-2.0
// The llhttp glue (see parse_engine.h).
#include "proxy/http/parse_engine.h"

#include <string_view>
#include <utility>

namespace idemgate::parser_internal {

namespace {
// At most 64 bytes of `text` for an error detail, anything but printable ASCII (and '"', '\\')
// as '?', so the JSON error body stays valid UTF-8.
std::string Printable(std::string_view text) {
  std::string shown(text.substr(0, 64));
  for (char& c : shown) {
    if (c < 0x20 || c > 0x7E || c == '"' || c == '\\') c = '?';
  }
  return shown;
}

Engine* Of(llhttp_t* p) { return static_cast<Engine*>(p->data); }

}  // namespace

void Engine::InitSettings() {
  llhttp_settings_init(&settings);
  settings.on_message_begin = [](llhttp_t* p) {
    Of(p)->started = true;
    return 0;
  };
  // The header limit counts raw bytes in Feed, where the position is known: llhttp reports a
  // span only at its end or at the end of the buffer, so counting here would make the outcome
  // depend on how the bytes were split.
  settings.on_method = [](llhttp_t* p, const char* at, size_t n) {
    Of(p)->method.append(at, n);
    return 0;
  };
  settings.on_url = [](llhttp_t* p, const char* at, size_t n) {
    Of(p)->target.append(at, n);
    return 0;
  };
  settings.on_status = [](llhttp_t* p, const char* at, size_t n) {
    Of(p)->reason.append(at, n);
    return 0;
  };
  // After the headers, fields and values are trailers: counted against the limit, not kept.
  settings.on_header_field = [](llhttp_t* p, const char* at, size_t n) {
    if (!Of(p)->headers_complete) Of(p)->field.append(at, n);
    return 0;
  };
  settings.on_header_value = [](llhttp_t* p, const char* at, size_t n) {
    Engine* e = Of(p);
    if (e->headers_complete) return 0;
    // A value longer than a string holds in place goes into room an earlier message left.
    if (e->value.empty() && n > e->value.capacity() && !e->spare_values.empty()) {
      e->value = std::move(e->spare_values.back());
      e->spare_values.pop_back();
      e->value.clear();
    }
    e->value.append(at, n);
    return 0;
  };
  settings.on_header_value_complete = [](llhttp_t* p) { return Of(p)->PushHeader(); };
  settings.on_headers_complete = [](llhttp_t* p) { return Of(p)->OnHeadersComplete(); };
  settings.on_chunk_header = [](llhttp_t* p) {
    Engine* e = Of(p);
    if (p->content_length > e->max_body - e->body_seen) {
      return e->Fail(ParseError::kBodyTooLarge, "The chunked body exceeds the limit of " +
                                                    std::to_string(e->max_body) + " bytes.");
    }
    // Pause so Feed knows where the chunk's data starts: llhttp's loose build skips the two
    // bytes after the data without looking at them, so Feed checks they are CRLF. After the
    // last chunk come the trailers, whose bytes Feed counts against the header limit.
    e->feed_pause = true;
    e->chunk_data_left = p->content_length;
    e->chunk_crlf_left = p->content_length > 0 ? 2 : 0;
    if (p->content_length == 0) e->in_trailers = true;
    return static_cast<int>(HPE_PAUSED);
  };
  settings.on_body = [](llhttp_t* p, const char* at, size_t n) {
    Engine* e = Of(p);
    if (n > e->max_body - e->body_seen) {
      return e->Fail(ParseError::kBodyTooLarge,
                     "The body exceeds the limit of " + std::to_string(e->max_body) + " bytes.");
    }
    e->body_seen += n;
    if (e->sink) {
      e->sink(std::string_view(at, n));
    } else {
      e->body.append(at, n);
    }
    return 0;
  };
  settings.on_message_complete = [](llhttp_t* p) { return Of(p)->OnMessageComplete(); };
}

// A name llhttp took is a token unless it is empty or holds a space: its loose build's table of
// name bytes is RFC 9110's tchar and SP, no more. A search for the one byte instead of a table
// lookup per byte (tests/unit/http/field_name_test.cc feeds every byte value to both parsers).
namespace {
bool IsTokenPastLlhttp(std::string_view name) {
  return !name.empty() && name.find(' ') == std::string_view::npos;
}
}  // namespace

// Keeps one field (trailers are dropped): the name must be a token, the value loses its
// trailing whitespace (llhttp strips only the leading one).
int Engine::PushHeader() {
  if (headers_complete) {
    field.clear();
    value.clear();
    return 0;
  }
  if (!IsTokenPastLlhttp(field)) {
    // Quoted for a person: at most 64 bytes, anything but printable ASCII as '?', so the JSON
    // error body stays valid UTF-8.
    std::string shown = field.substr(0, 64);
    for (char& c : shown) {
      if (c < 0x20 || c > 0x7E) c = '?';
    }
    return Fail(ParseError::kMalformed, "The header name \"" + shown + "\" is not a valid token.");
  }
  // Trimmed in place and moved into the list: no copy of the name or the value.
  const std::string_view trimmed = TrimOws(value);
  const size_t lead = static_cast<size_t>(trimmed.data() - value.data());
  value.resize(lead + trimmed.size());
  value.erase(0, lead);
  headers.emplace_back(std::move(field), std::move(value));
  field.clear();
  value.clear();
  return 0;
}

int Engine::OnHeadersComplete() {
  if (!field.empty() && PushHeader() != 0) return -1;
  headers_complete = true;
  framing_length =
      (parser.flags & F_CONTENT_LENGTH) ? static_cast<int64_t>(parser.content_length) : -1;
  framing_chunked = (parser.flags & F_CHUNKED) != 0;
  head_keep_alive = llhttp_should_keep_alive(&parser) != 0;
  if (parser.http_major != 1 || parser.http_minor > 1) {
    return Fail(ParseError::kMalformed, "Only HTTP/1.0 and HTTP/1.1 are supported.");
  }
  return type == HTTP_REQUEST ? OnRequestHeadersComplete() : OnResponseHeadersComplete();
}

int Engine::OnRequestHeadersComplete() {
  if (parser.method == HTTP_CONNECT) {
    return Fail(ParseError::kMalformed, "CONNECT is not supported: the gateway does not tunnel.");
  }
  // An Upgrade offer (e.g. h2c) is declined by ignoring it: the request is served as HTTP/1.1
  // and the Upgrade header, being hop-by-hop, is not forwarded.
  parser.upgrade = 0;
  if ((parser.flags & F_TRANSFER_ENCODING) && !TransferEncodingIsPlainChunked(headers)) {
    return Fail(ParseError::kMalformed,
                "Transfer-Encoding in a request must be exactly \"chunked\".");
  }
  if (!hold_at_headers && (parser.flags & F_CONTENT_LENGTH) && parser.content_length > max_body) {
    return FailContentLength(parser.content_length);
  }
  return CheckRequestHost();
}

// RFC 9112 3.2: one Host at most (two would let the gateway route by one and the upstream act
// on the other); an absolute-form target's host is the one the upstream acts on (3.2.2), so a
// Host that names another is refused rather than routed by either.
int Engine::CheckRequestHost() {
  if (CountHeader(headers, "Host") > 1) {
    return Fail(ParseError::kMalformed, "The Host header was given more than once; give it once.");
  }
  const std::string_view authority = TargetAuthority(target);
  const std::string* host = FindHeader(headers, "Host");
  if (authority.empty() || host == nullptr) return 0;
  if (NormalizeHost(authority) == NormalizeHost(*host)) return 0;
  return Fail(ParseError::kMalformed,
              "The request target names the host \"" + Printable(NormalizeHost(authority)) +
                  "\" but the Host header names \"" + Printable(NormalizeHost(*host)) +
                  "\"; send them the same.");
}

int Engine::OnResponseHeadersComplete() {
  const int status = parser.status_code;
  if (status < 100 || status > 599) {  // llhttp takes any 1-3 digits ("HTTP/1.1 3 OK")
    return Fail(ParseError::kMalformed, "The upstream's status code " + std::to_string(status) +
                                            " is not in the range 100 to 599.");
  }
  if (status == 101) {
    return Fail(ParseError::kMalformed,
                "The upstream switched protocols (101), which the gateway does not support.");
  }
  parser.upgrade = 0;  // "Connection: upgrade" on any other status switches nothing
  // RFC 9112 6.3: a 1xx, 204 or 304 answer, and any answer to HEAD, ends at its blank line,
  // whatever Content-Length or Transfer-Encoding it announces (1 tells llhttp 8.1 so: it would
  // wait for a 304's Content-Length bytes, which never come, and stall the connection).
  if (status >= 100 && status < 200) {
    interim = true;  // 100, 102, 103...: skipped; the final response follows
    return 1;
  }
  if (head_request || status == 204 || status == 304) return 1;
  // A body with a transfer-coding the gateway does not decode would be stored and relayed still
  // coded, framed by Content-Length, with nothing saying how to read it.
  if ((parser.flags & F_TRANSFER_ENCODING) && !TransferEncodingIsPlainChunked(headers)) {
    return Fail(ParseError::kMalformed,
                "The upstream's Transfer-Encoding is not exactly \"chunked\"; the gateway does "
                "not decode other transfer-codings.");
  }
  if ((parser.flags & F_CONTENT_LENGTH) && parser.content_length > max_body) {
    return Fail(ParseError::kBodyTooLarge,
                "The upstream's Content-Length " + std::to_string(parser.content_length) +
                    " exceeds the limit of " + std::to_string(max_body) + " bytes.");
  }
  return 0;
}

int Engine::OnMessageComplete() {
  if (interim) {
    ResetMessage();  // forget the 1xx and keep parsing the same stream
    started = true;
    // Pause so that Feed scans the next response's header section from its first byte.
    feed_pause = true;
    return HPE_PAUSED;
  }
  keep_alive = llhttp_should_keep_alive(&parser) != 0;
  message_complete = true;
  return HPE_PAUSED;
}

void Engine::FailFromLlhttp(llhttp_errno_t err) {
  if (err == HPE_PAUSED_H2_UPGRADE) {  // the HTTP/2 connection preface, "PRI * HTTP/2.0"
    Fail(ParseError::kMalformed,
         "HTTP/2 is not spoken here: this gateway serves HTTP/1.1 (and 1.0) only; send the "
         "request without HTTP/2 prior knowledge.");
    return;
  }
  const char* why = llhttp_get_error_reason(&parser);
  std::string text = type == HTTP_REQUEST ? "The request is not valid HTTP/1.1"
                                          : "The upstream response is not valid HTTP/1.1";
  if (why != nullptr && *why != '\0') text.append(": ").append(why);
  text.append(".");
  Fail(ParseError::kMalformed, std::move(text));
}

// One llhttp_execute over bytes that lie within one header section or after it.
size_t Engine::Execute(const char* data, size_t len) {
  llhttp_errno_t err = llhttp_execute(&parser, data, len);
  if (err == HPE_OK) return len;
  const char* pos = llhttp_get_error_pos(&parser);
  size_t used = (pos != nullptr && pos >= data && pos <= data + len) ? pos - data : len;
  if (err == HPE_PAUSED && message_complete) return used;
  if (err == HPE_PAUSED && feed_pause) {
    feed_pause = false;
    llhttp_resume(&parser);
    return used;
  }
  // A callback that failed has already recorded why; otherwise llhttp rejected the bytes.
  if (error == ParseError::kNone) FailFromLlhttp(err);
  return used;
}

// How many of these body bytes may go to llhttp: all, or up to a chunk's data that is not
// followed by CRLF (a smuggling shape: a strict parser in front would frame it differently).
size_t Engine::CheckChunkEnd(const char* data, size_t len) {
  size_t i = 0;
  if (chunk_data_left > 0) {
    i = chunk_data_left < len ? chunk_data_left : len;
    chunk_data_left -= i;
  }
  for (; i < len && chunk_data_left == 0 && chunk_crlf_left > 0; ++i, --chunk_crlf_left) {
    if (data[i] != (chunk_crlf_left == 2 ? '\r' : '\n')) return i;
  }
  return len;
}

// Hands llhttp the bytes one section at a time: the header section is checked by the scanner
// first, and the header section and trailers are counted against max_header_bytes by position,
// so the outcome never depends on how the stream was split.
size_t Engine::Feed(const char* data, size_t len) {
  size_t total = 0;
  while (total < len && error == ParseError::kNone && !message_complete) {
    if (hold_at_headers && headers_complete && !released) break;
    size_t chunk = len - total;
    const char* bad = nullptr;  // the scanner rejects the byte right after `chunk`
    const bool counted = !scanner.done() || in_trailers;
    if (!scanner.done()) {
      chunk = scanner.Scan(data + total, chunk);
      bad = scanner.error();
    } else if (chunk_crlf_left > 0) {
      chunk = CheckChunkEnd(data + total, chunk);
      if (chunk < len - total) bad = "a chunk's data is not followed by CRLF";
    }
    // The limit falls before the end of what we have (or on the bad byte): llhttp sees what
    // fits, so an error earlier in the bytes still wins, then the limit does.
    const bool over = counted && chunk + (bad != nullptr ? 1 : 0) > HeaderAllowance();
    if (over) chunk = HeaderAllowance();
    const uint64_t resets_before = resets;
    size_t used = Execute(data + total, chunk);
    // A skipped 1xx resets the count (and the scanner) at its end: its bytes are not counted
    // for the next response, and what follows it is scanned again from there.
    if (counted && resets == resets_before) header_bytes += used;
    total += used;
    if (error != ParseError::kNone || message_complete) return total;
    if (used > 0 && used < chunk) continue;  // llhttp paused where Feed must look again
    if (over) {
      FailHeadersTooLarge();
      return total;
    }
    if (bad != nullptr) {
      Fail(ParseError::kMalformed, std::string("The ") +
                                       (type == HTTP_REQUEST ? "request" : "upstream response") +
                                       " is not valid HTTP/1.1: " + bad + ".");
      return total;
    }
    if (used == 0) break;
  }
  return total;
}

}  // namespace idemgate::parser_internal
