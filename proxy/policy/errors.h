// SPDX-License-Identifier: Apache-2.0
// The gateway's own answers: one table of code (http/error_types.h) -> status -> default
// detail (SPEC §8).
#pragma once

#include <string>
#include <string_view>

#include "proxy/http/error_types.h"
#include "store/record.h"

namespace idemgate {

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
