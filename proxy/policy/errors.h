// The gateway's own answers: one table of code -> status -> default detail (SPEC §8).
#pragma once

#include <string>
#include <string_view>

#include "store/record.h"

namespace idemgate {

enum class ErrorCode {
  kBadRequest,             // 400 bad_request
  kMissingCredentials,     // 401 missing_credentials
  kIdempotencyKeyMissing,  // 400 idempotency_key_missing
  kIdempotencyKeyInvalid,  // 400 idempotency_key_invalid
  kRequestTimeout,         // 408 request_timeout
  kIdempotencyKeyInUse,    // 409 idempotency_key_in_use
  kRequestTooLarge,        // 413 request_too_large
  kIdempotencyKeyReused,   // 422 idempotency_key_reused
  kHeadersTooLarge,        // 431 headers_too_large
  kUpstreamUnavailable,    // 502 upstream_unavailable
  kUpstreamFailed,         // 502 upstream_failed
  kStoreUnavailable,       // 503 store_unavailable
  kNotForwarded,           // 503 not_forwarded
  kUpstreamTimeout,        // 504 upstream_timeout
};

struct ErrorInfo {
  int status;
  const char* reason;          // "Bad Request"
  const char* code;            // "bad_request"
  const char* default_detail;  // one sentence for a person
};

const ErrorInfo& GetErrorInfo(ErrorCode code);

// JSON string escaping (quotes, backslash, control characters).
std::string JsonEscape(std::string_view text);

// {"error":"<code>","detail":"<detail>"} with Content-Type: application/json. An empty detail
// uses the default. Extra headers (Retry-After, WWW-Authenticate) are added by the caller.
StoredResponse MakeErrorResponse(ErrorCode code, std::string_view detail = {});

// What the gateway answers a request the parser refused with (http/http_parser.h).
enum class ParseError;
ErrorCode ErrorCodeFor(ParseError error);

}  // namespace idemgate
