// libFuzzer target: client bytes -> RequestParser (whole and split) -> guard, fingerprint,
// upstream serialization, error responses; aborts when an invariant breaks.
//
// Input: byte 0 = flags (bit 0: the guarded-config variant, bit 1: small limits), byte 1 = the
// seed of the split sizes, the rest = what a client sends on one connection.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "conf/config.h"
#include "proxy/http/http_message.h"
#include "proxy/http/http_parser.h"
#include "proxy/policy/errors.h"
#include "proxy/policy/guard.h"
#include "tests/fuzz/fuzz_util.h"

namespace idemgate {
namespace {

using fuzz::SplitSizes;

struct Outcome {
  std::vector<Request> requests;
  ParseError error = ParseError::kNone;
  std::string detail;
  bool started = false;           // an unfinished request is pending at the end
  bool headers_complete = false;  // ... with its headers parsed
};

bool SameRequest(const Request& a, const Request& b) {
  if (a.method != b.method || a.target != b.target || a.http_major != b.http_major ||
      a.http_minor != b.http_minor || a.body != b.body || a.keep_alive != b.keep_alive ||
      a.expect_continue != b.expect_continue || a.chunked != b.chunked ||
      a.headers.size() != b.headers.size()) {
    return false;
  }
  for (size_t i = 0; i < a.headers.size(); ++i) {
    if (a.headers[i].name != b.headers[i].name || a.headers[i].value != b.headers[i].value) {
      return false;
    }
  }
  return true;
}

// Feeds the stream the way ClientConn does: whatever is buffered, again after each request,
// stopping at an error or after a request that does not keep the connection.
Outcome Parse(std::string_view stream, const std::vector<size_t>& pieces, uint64_t max_body,
              uint64_t max_headers) {
  RequestParser parser(max_body, max_headers);
  Outcome out;
  std::string buffered;
  size_t offset = 0;
  for (size_t piece : pieces) {
    buffered.append(stream.substr(offset, piece));
    offset += piece;
    while (!buffered.empty()) {
      size_t used = parser.Feed(buffered.data(), buffered.size());
      FUZZ_CHECK(used <= buffered.size());
      // Progress: Feed stops early only at the end of a message or at an error.
      FUZZ_CHECK(used == buffered.size() || parser.message_complete() ||
                 parser.error() != ParseError::kNone);
      buffered.erase(0, used);
      if (parser.error() != ParseError::kNone) {
        out.error = parser.error();
        out.detail = parser.error_detail();
        FUZZ_CHECK(!out.detail.empty());
        return out;
      }
      if (!parser.message_complete()) break;
      out.requests.push_back(parser.TakeRequest());
      if (!out.requests.back().keep_alive) return out;
    }
  }
  out.started = parser.started();
  out.headers_complete = parser.headers_complete();
  return out;
}

// The bytes a client gets for a gateway error parse back to the same status and JSON body.
void CheckErrorResponse(ErrorCode code, std::string_view detail) {
  StoredResponse response = MakeErrorResponse(code, detail);
  FUZZ_CHECK(response.status == GetErrorInfo(code).status);
  // JSON with every control character escaped (and, from the parser's details, pure ASCII).
  for (char c : response.body) {
    FUZZ_CHECK(static_cast<unsigned char>(c) >= 0x20 && static_cast<unsigned char>(c) < 0x7F);
  }
  std::string bytes = SerializeResponse(response, false, ConnectionHeader::kClose, false);
  ResponseParser parser(1 << 20);
  parser.Begin(false);
  FUZZ_CHECK(parser.Feed(bytes.data(), bytes.size()) == bytes.size());
  FUZZ_CHECK(parser.error() == ParseError::kNone && parser.message_complete());
  Response back = parser.TakeResponse();
  FUZZ_CHECK(back.status == response.status);
  FUZZ_CHECK(back.body == response.body);
  FUZZ_CHECK(!back.keep_alive);
}

bool VisibleAsciiKey(const std::string& key) {
  if (key.empty() || key.size() > 255) return false;
  for (char c : key) {
    if (c < 0x21 || c > 0x7E) return false;
  }
  return true;
}

// What goes upstream is one well-framed request with the same method, target and body.
void CheckUpstreamRequest(const Request& request) {
  std::string bytes = SerializeUpstreamRequest(request, "192.0.2.7", "http");
  RequestParser parser(1 << 24, 1 << 24);
  FUZZ_CHECK(parser.Feed(bytes.data(), bytes.size()) == bytes.size());
  FUZZ_CHECK(parser.error() == ParseError::kNone);
  FUZZ_CHECK(parser.message_complete());
  Request sent = parser.TakeRequest();
  FUZZ_CHECK(sent.method == request.method);
  FUZZ_CHECK(sent.target == request.target);
  FUZZ_CHECK(sent.body == request.body);
  FUZZ_CHECK(!sent.chunked);
  FUZZ_CHECK(CountHeader(sent.headers, "Content-Length") <= 1);
  FUZZ_CHECK(CountHeader(sent.headers, "Transfer-Encoding") == 0);
  FUZZ_CHECK(CountHeader(sent.headers, "X-Forwarded-Proto") == 1);
}

void CheckRequest(const Config& config, const Request& request) {
  FUZZ_CHECK(!request.method.empty());
  FUZZ_CHECK(!request.target.empty());
  GuardDecision d = EvaluateGuard(config, request);
  switch (d.kind) {
    case GuardKind::kPassthrough:
      break;
    case GuardKind::kGuarded:
      FUZZ_CHECK(VisibleAsciiKey(d.key));
      FUZZ_CHECK(d.fingerprint ==
                 ComputeFingerprint(request, config.idempotency.fingerprint_headers));
      break;
    case GuardKind::kReject:
      CheckErrorResponse(d.error, d.detail);
      break;
  }
  CheckUpstreamRequest(request);
}

const Config& PlainConfig() {
  static const Config config;
  return config;
}

const Config& StrictConfig() {
  static const Config config = [] {
    Config c;
    c.idempotency.methods = {"POST", "PATCH", "PUT", "DELETE"};
    c.idempotency.require_key = {"/payments", "/v1/"};
    c.idempotency.fingerprint_headers = {"content-type", "x-tenant"};
    c.scope.secret = "fuzz-secret";
    return c;
  }();
  return config;
}

}  // namespace
}  // namespace idemgate

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace idemgate;
  if (size < 2) return 0;
  const uint8_t flags = data[0];
  const uint8_t seed = data[1];
  std::string_view stream(reinterpret_cast<const char*>(data) + 2, size - 2);
  const Config& config = (flags & 1) ? StrictConfig() : PlainConfig();
  const uint64_t max_body = (flags & 2) ? 64 : config.limits.max_request_body;
  const uint64_t max_headers = (flags & 2) ? 256 : config.limits.max_header_bytes;

  Outcome whole = Parse(stream, {stream.size()}, max_body, max_headers);
  Outcome split = Parse(stream, SplitSizes(seed, stream.size()), max_body, max_headers);
  if (std::getenv("FUZZ_VERBOSE") != nullptr) {
    for (const Outcome* o : {&whole, &split}) {
      std::fprintf(stderr, "%s: %zu requests, error %d (%s), started %d, headers %d\n",
                   o == &whole ? "whole" : "split", o->requests.size(), static_cast<int>(o->error),
                   o->detail.c_str(), o->started, o->headers_complete);
    }
  }
  FUZZ_CHECK(whole.error == split.error);
  FUZZ_CHECK(whole.requests.size() == split.requests.size());
  for (size_t i = 0; i < whole.requests.size(); ++i) {
    FUZZ_CHECK(SameRequest(whole.requests[i], split.requests[i]));
  }
  FUZZ_CHECK(whole.started == split.started);
  FUZZ_CHECK(whole.headers_complete == split.headers_complete);

  for (const Request& request : whole.requests) CheckRequest(config, request);
  if (whole.error != ParseError::kNone) CheckErrorResponse(ErrorCodeFor(whole.error), whole.detail);
  return 0;
}
