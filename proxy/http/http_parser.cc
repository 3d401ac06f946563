// SPDX-License-Identifier: Apache-2.0
// llhttp wrapper: request and response parsing with the gateway's limits and smuggling checks
// (the header section's raw-byte checks are in header_scan.h).
#include "proxy/http/http_parser.h"

#include <string_view>
#include <utility>

#include "proxy/http/parse_engine.h"

namespace idemgate {

using parser_internal::Engine;

// ---------------------------------------------------------------------------------------------

struct RequestParser::Impl {
  Impl(uint64_t max_body, uint64_t max_header_bytes)
      : engine(HTTP_REQUEST, max_body, max_header_bytes) {}
  Engine engine;
  Request request;  // filled at headers complete and at message complete
  // Once per request, at the end of its headers: the engine is done with the method, target and
  // header list (they were checked at headers complete), so they move over.
  void Sync() {
    request.method = std::move(engine.method);
    if (request.method.empty()) {
      request.method = llhttp_method_name(static_cast<llhttp_method_t>(engine.parser.method));
    }
    request.target = std::move(engine.target);
    request.http_major = engine.parser.http_major;
    request.http_minor = engine.parser.http_minor;
    request.headers = std::move(engine.headers);
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
  NextRequest();
  return out;
}

void RequestParser::DropRequest() {
  // The engine's own list went to the request at Sync (trailers are not kept): empty here.
  // NextRequest's reset clears the entries and keeps the room.
  if (impl_->engine.headers.empty()) impl_->engine.headers = std::move(impl_->request.headers);
  NextRequest();
}

void RequestParser::NextRequest() {
  impl_->request = Request{};
  Engine& e = impl_->engine;
  e.ResetMessage();
  if (llhttp_get_errno(&e.parser) == HPE_PAUSED) llhttp_resume(&e.parser);
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

void ResponseParser::GiveBackHeaders(Headers&& headers) {
  Engine& e = impl_->engine;
  // Only while the engine holds no list of its own (taken by TakeHead; trailers are not kept).
  e.KeepSpareValues(headers);
  if (!e.headers.empty() || headers.capacity() <= e.headers.capacity()) return;
  headers.clear();
  e.headers = std::move(headers);
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
  // A streamed response's headers went with TakeHead: the list left is kept for the next one.
  if (!e.headers.empty()) out.headers = std::move(e.headers);
  out.body = std::move(e.body);
  out.keep_alive = e.keep_alive;
  out.chunked = e.framing_chunked;
  out.content_length = e.framing_length;
  e.ResetMessage();
  return out;
}

}  // namespace idemgate
