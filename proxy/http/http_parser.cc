// llhttp wrapper: request and response parsing with the gateway's limits and smuggling checks.
#include "proxy/http/http_parser.h"

#include <string_view>
#include <utility>

#include "llhttp.h"

namespace idemgate {

ErrorCode ErrorCodeFor(ParseError error) {
  switch (error) {
    case ParseError::kBodyTooLarge:
      return ErrorCode::kRequestTooLarge;
    case ParseError::kHeadersTooLarge:
      return ErrorCode::kHeadersTooLarge;
    default:
      return ErrorCode::kBadRequest;
  }
}
namespace {

// A message's Transfer-Encoding must be exactly "chunked": "gzip, chunked" would hand on a body
// still coded once the (hop-by-hop) header is dropped, and "gzip" alone is not even framed.
bool TransferEncodingIsPlainChunked(const Headers& headers) {
  int tokens = 0;
  bool chunked = false;
  for (const Header& h : headers) {
    if (!HeaderNameEquals(h.name, "Transfer-Encoding")) continue;
    std::string_view rest = h.value;
    while (true) {
      size_t comma = rest.find(',');
      std::string_view token = TrimOws(rest.substr(0, comma));
      if (!token.empty()) {
        ++tokens;
        chunked = HeaderNameEquals(token, "chunked");
      }
      if (comma == std::string_view::npos) break;
      rest.remove_prefix(comma + 1);
    }
  }
  return tokens == 1 && chunked;
}

bool IsTchar(char c) {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) return true;
  return std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

// At most 64 bytes of `text` for an error detail, anything but printable ASCII (and '"', '\\')
// as '?', so the JSON error body stays valid UTF-8.
std::string Printable(std::string_view text) {
  std::string shown(text.substr(0, 64));
  for (char& c : shown) {
    if (c < 0x20 || c > 0x7E || c == '"' || c == '\\') c = '?';
  }
  return shown;
}

bool IsToken(std::string_view text) {
  if (text.empty()) return false;
  for (char c : text) {
    if (!IsTchar(c)) return false;
  }
  return true;
}

// Checks the raw bytes of a header section (start line + fields + blank line) for what llhttp
// in its loose build accepts: bare LF, bare CR and obs-fold. It also finds where the section
// ends, so the parser can hand llhttp the header section and the body separately.
class HeaderSectionScanner {
 public:
  void Reset() { *this = HeaderSectionScanner(); }
  bool done() const { return state_ == kDone; }
  const char* error() const { return error_; }

  // Scans up to the end of the header section; returns the bytes that belong to it.
  size_t Scan(const char* data, size_t len) {
    for (size_t i = 0; i < len; ++i) {
      if (!Step(data[i])) return i;
      if (state_ == kDone) return i + 1;
    }
    return len;
  }

 private:
  enum State { kLineStart, kInLine, kExpectLf, kExpectFinalLf, kDone };

  bool Fail(const char* why) {
    error_ = why;
    return false;
  }
  bool Step(char c) {
    switch (state_) {
      case kLineStart:
        if (c == '\r') {
          state_ = lines_ == 0 ? kExpectLf : kExpectFinalLf;  // empty lines before the start line
          return true;
        }
        if (c == '\n') return Fail("a line ends in a bare LF instead of CRLF");
        if (lines_ > 0 && (c == ' ' || c == '\t')) {
          return Fail("a header line is folded (obs-fold), which is not allowed");
        }
        state_ = kInLine;
        line_has_content_ = true;
        return true;
      case kInLine:
        if (c == '\r') state_ = kExpectLf;
        if (c == '\n') return Fail("a line ends in a bare LF instead of CRLF");
        return true;
      case kExpectLf:
      case kExpectFinalLf:
        if (c != '\n') return Fail("a bare CR appears without LF");
        if (state_ == kExpectFinalLf) {
          state_ = kDone;
          return true;
        }
        if (line_has_content_) ++lines_;
        line_has_content_ = false;
        state_ = kLineStart;
        return true;
      case kDone:
        return true;
    }
    return true;
  }

  State state_ = kLineStart;
  int lines_ = 0;                  // complete non-empty lines so far
  bool line_has_content_ = false;  // the current line is not one of the leading empty lines
  const char* error_ = nullptr;
};

// The parsing state shared by both directions; llhttp calls back into it through `data`.
struct Engine {
  Engine(llhttp_type_t type, uint64_t max_body, uint64_t max_header_bytes)
      : type(type), max_body(max_body), default_max_body(max_body),
        max_header_bytes(max_header_bytes) {
    InitSettings();
    Reinit();
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
    headers.clear();
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
  std::string body;
};

Engine* Of(llhttp_t* p) { return static_cast<Engine*>(p->data); }

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
    if (!Of(p)->headers_complete) Of(p)->value.append(at, n);
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

// Keeps one field (trailers are dropped): the name must be a token, the value loses its
// trailing whitespace (llhttp strips only the leading one).
int Engine::PushHeader() {
  if (headers_complete) {
    field.clear();
    value.clear();
    return 0;
  }
  if (!IsToken(field)) {
    // Quoted for a person: at most 64 bytes, anything but printable ASCII as '?', so the JSON
    // error body stays valid UTF-8.
    std::string shown = field.substr(0, 64);
    for (char& c : shown) {
      if (c < 0x20 || c > 0x7E) c = '?';
    }
    return Fail(ParseError::kMalformed, "The header name \"" + shown + "\" is not a valid token.");
  }
  std::string_view trimmed = TrimOws(value);
  headers.push_back(Header{std::move(field), std::string(trimmed)});
  field.clear();
  value.clear();
  return 0;
}

int Engine::OnHeadersComplete() {
  if (!field.empty() && PushHeader() != 0) return -1;
  headers_complete = true;
  framing_length = (parser.flags & F_CONTENT_LENGTH) ? static_cast<int64_t>(parser.content_length)
                                                     : -1;
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

}  // namespace

// ---------------------------------------------------------------------------------------------

struct RequestParser::Impl {
  Impl(uint64_t max_body, uint64_t max_header_bytes)
      : engine(HTTP_REQUEST, max_body, max_header_bytes) {}
  Engine engine;
  Request request;  // filled at headers complete and at message complete
  void Sync() {
    request.method = engine.method;
    if (request.method.empty()) {
      request.method = llhttp_method_name(static_cast<llhttp_method_t>(engine.parser.method));
    }
    request.target = engine.target;
    request.http_major = engine.parser.http_major;
    request.http_minor = engine.parser.http_minor;
    request.headers = engine.headers;
    const std::string* expect = FindHeader(request.headers, "Expect");
    request.expect_continue = expect != nullptr && HeaderNameEquals(*expect, "100-continue");
    request.chunked = engine.framing_chunked;
    request.content_length = engine.framing_length;
    request.keep_alive = engine.head_keep_alive;
  }
};

RequestParser::RequestParser(uint64_t max_body, uint64_t max_header_bytes)
    : impl_(std::make_unique<Impl>(max_body, max_header_bytes)) {}
RequestParser::~RequestParser() = default;

size_t RequestParser::Feed(const char* data, size_t len) {
  Engine& e = impl_->engine;
  const bool had_headers = e.headers_complete;
  size_t used = e.Feed(data, len);
  if (!had_headers && e.headers_complete) impl_->Sync();
  if (e.message_complete) {
    impl_->request.body = e.body;
    impl_->request.keep_alive = e.keep_alive;
  }
  return used;
}

void RequestParser::set_decide_body(bool on) { impl_->engine.hold_at_headers = on; }
bool RequestParser::body_decided() const { return impl_->engine.released; }

bool RequestParser::DecideBody(uint64_t max_body, BodySink sink) {
  Engine& e = impl_->engine;
  e.released = true;
  e.max_body = max_body == 0 ? UINT64_MAX : max_body;
  e.sink = std::move(sink);
  if (e.framing_length >= 0 && static_cast<uint64_t>(e.framing_length) > e.max_body) {
    e.FailContentLength(static_cast<uint64_t>(e.framing_length));
    return false;
  }
  return true;
}

bool RequestParser::started() const { return impl_->engine.started; }
bool RequestParser::headers_complete() const { return impl_->engine.headers_complete; }
bool RequestParser::message_complete() const { return impl_->engine.message_complete; }
ParseError RequestParser::error() const { return impl_->engine.error; }
const std::string& RequestParser::error_detail() const { return impl_->engine.detail; }
const Request& RequestParser::request() const { return impl_->request; }
Request& RequestParser::mutable_request() { return impl_->request; }

Request RequestParser::TakeRequest() {
  Request out = std::move(impl_->request);
  impl_->request = Request{};
  Engine& e = impl_->engine;
  e.ResetMessage();
  if (llhttp_get_errno(&e.parser) == HPE_PAUSED) llhttp_resume(&e.parser);
  return out;
}

// ---------------------------------------------------------------------------------------------

struct ResponseParser::Impl {
  Impl(uint64_t max_body, uint64_t max_header_bytes)
      : engine(HTTP_RESPONSE, max_body, max_header_bytes) {}
  Engine engine;
};

ResponseParser::ResponseParser(uint64_t max_body, uint64_t max_header_bytes)
    : impl_(std::make_unique<Impl>(max_body, max_header_bytes)) {}
ResponseParser::~ResponseParser() = default;

void ResponseParser::Begin(bool head_request, BodySink sink) {
  // One response per request on an upstream connection: each starts from a clean parser.
  Engine& e = impl_->engine;
  e.hold_at_headers = sink != nullptr;
  e.sink = std::move(sink);
  e.Reinit();
  e.head_request = head_request;
}

bool ResponseParser::headers_complete() const { return impl_->engine.headers_complete; }

Response ResponseParser::TakeHead() {
  Engine& e = impl_->engine;
  e.released = true;
  Response out;
  out.status = e.parser.status_code;
  out.reason = std::move(e.reason);
  out.http_minor = e.parser.http_minor;
  out.headers = std::move(e.headers);
  out.chunked = e.framing_chunked;
  out.content_length = e.framing_length;
  return out;
}

size_t ResponseParser::Feed(const char* data, size_t len) { return impl_->engine.Feed(data, len); }

void ResponseParser::FeedEof() {
  Engine& e = impl_->engine;
  if (e.error != ParseError::kNone || e.message_complete) return;
  if (!e.started) {
    e.Fail(ParseError::kMalformed, "The upstream closed the connection without a response.");
    return;
  }
  llhttp_errno_t err = llhttp_finish(&e.parser);
  if (e.message_complete) return;  // a close-delimited body ended here
  if (e.error == ParseError::kNone) {
    if (err != HPE_OK && err != HPE_PAUSED) {
      e.FailFromLlhttp(err);
      e.detail = "The upstream closed the connection in the middle of its response.";
    } else {
      e.Fail(ParseError::kMalformed,
             "The upstream closed the connection in the middle of its response.");
    }
  }
}

bool ResponseParser::started() const { return impl_->engine.started; }
bool ResponseParser::message_complete() const { return impl_->engine.message_complete; }
ParseError ResponseParser::error() const { return impl_->engine.error; }
const std::string& ResponseParser::error_detail() const { return impl_->engine.detail; }

Response ResponseParser::TakeResponse() {
  Engine& e = impl_->engine;
  Response out;
  out.status = e.parser.status_code;
  out.reason = std::move(e.reason);
  out.http_minor = e.parser.http_minor;
  out.headers = std::move(e.headers);
  out.body = std::move(e.body);
  out.keep_alive = e.keep_alive;
  out.chunked = e.framing_chunked;
  out.content_length = e.framing_length;
  e.ResetMessage();
  return out;
}

}  // namespace idemgate
