// The gateway's own answers: the code -> status -> detail table and the JSON error body.
#include "proxy/policy/errors.h"

#include <cstdio>

#include "proxy/http/http_parser.h"

namespace idemgate {
namespace {

// Indexed by ErrorCode; the order must match the enum.
constexpr ErrorInfo kErrorTable[] = {
    {400, "Bad Request", "bad_request",
     "The request is not valid HTTP/1.1 or its framing is ambiguous."},
    {401, "Unauthorized", "missing_credentials",
     "A request with an Idempotency-Key needs a credential, because keys are scoped to the "
     "caller."},
    {400, "Bad Request", "idempotency_key_missing",
     "This endpoint requires an Idempotency-Key header."},
    {400, "Bad Request", "idempotency_key_invalid",
     "The Idempotency-Key header must be given once, as 1 to 255 visible ASCII characters "
     "(optionally as a quoted string)."},
    {408, "Request Timeout", "request_timeout",
     "The request was not received completely in time."},
    {409, "Conflict", "idempotency_key_in_use",
     "A request with this Idempotency-Key is still being processed; retry after the time given "
     "in Retry-After."},
    {413, "Payload Too Large", "request_too_large",
     "The request body is larger than this gateway accepts."},
    {422, "Unprocessable Entity", "idempotency_key_reused",
     "This Idempotency-Key was already used for a different request."},
    {431, "Request Header Fields Too Large", "headers_too_large",
     "The request line and headers are larger than this gateway accepts."},
    {502, "Bad Gateway", "upstream_unavailable",
     "The upstream service could not be reached and nothing was sent to it, so the request can "
     "be retried."},
    {502, "Bad Gateway", "upstream_failed",
     "The upstream service failed before sending a complete response, so the request may or may "
     "not have been executed."},
    {503, "Service Unavailable", "store_unavailable",
     "The idempotency store is unavailable, so the request was not forwarded; retry later."},
    {503, "Service Unavailable", "not_forwarded",
     "The gateway could not start the request before its claim on the key ran out (it was "
     "paused or overloaded), so nothing was forwarded and the key is free; retry."},
    {504, "Gateway Timeout", "upstream_timeout",
     "The upstream service did not respond in time, so the request may or may not have been "
     "executed."},
};

static_assert(sizeof(kErrorTable) / sizeof(kErrorTable[0]) ==
                  static_cast<size_t>(ErrorCode::kUpstreamTimeout) + 1,
              "kErrorTable must have one row per ErrorCode");

}  // namespace

const ErrorInfo& GetErrorInfo(ErrorCode code) {
  size_t index = static_cast<size_t>(code);
  if (index >= sizeof(kErrorTable) / sizeof(kErrorTable[0])) index = 0;
  return kErrorTable[index];
}

std::string JsonEscape(std::string_view text) {
  std::string out;
  out.reserve(text.size() + 8);
  for (char ch : text) {
    unsigned char c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      default:
        if (c < 0x20 || c == 0x7F) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        } else {
          out += ch;  // printable ASCII and UTF-8 bytes as they are
        }
    }
  }
  return out;
}

StoredResponse MakeErrorResponse(ErrorCode code, std::string_view detail) {
  const ErrorInfo& info = GetErrorInfo(code);
  StoredResponse response;
  response.status = info.status;
  response.reason = info.reason;
  response.headers.emplace_back("Content-Type", "application/json");
  std::string_view text = detail.empty() ? std::string_view(info.default_detail) : detail;
  response.body = std::string("{\"error\":\"") + info.code + "\",\"detail\":\"" + JsonEscape(text) +
                  "\"}";
  return response;
}

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

}  // namespace idemgate
